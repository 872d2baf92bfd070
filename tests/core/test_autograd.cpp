// The autograd engine: accumulation, graph reuse, version checks, hooks, callbacks, anomaly mode,
// grad mode and the functional grad API.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/kiln.h"

using namespace kiln;

namespace {
Tensor leaf(std::vector<float> v, Shape s) { return tensor(v, s).set_requires_grad(true); }
}  // namespace

TEST_CASE("chain rule through a small graph", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor w = leaf({0.5, -1, 2}, {3});
  Tensor y = sum(tanh(x * w) * x);
  y.backward();
  std::vector<float> gx = x.grad().to_vector<float>(), gw = w.grad().to_vector<float>();
  std::vector<float> xv{1, 2, 3}, wv{0.5, -1, 2};
  for (size_t i = 0; i < 3; ++i) {
    double t = std::tanh(xv[i] * wv[i]);
    CHECK(gx[i] == Approx(t + xv[i] * wv[i] * (1 - t * t)).epsilon(1e-5));
    CHECK(gw[i] == Approx(xv[i] * xv[i] * (1 - t * t)).epsilon(1e-5));
  }
  CHECK(x.is_leaf());
  CHECK(!y.is_leaf());
  CHECK(y.grad_fn()->name() == "sum");
}

TEST_CASE("gradients accumulate into .grad in place", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  sum(x * 3.0).backward();
  Tensor g = x.grad();
  const void* storage = g.data_ptr();
  sum(x * x).backward();
  CHECK(x.grad().data_ptr() == storage);  // accumulated in place: views into flat buffers stay valid
  CHECK(x.grad().to_vector<float>() == std::vector<float>{5, 7});
  // A view of a flat buffer as .grad receives the accumulation.
  Tensor flat = zeros({4});
  Tensor p = leaf({1, 1}, {2});
  p.set_grad(flat.narrow(0, 2, 2));
  sum(p * 2.0).backward();
  CHECK(flat.to_vector<float>() == std::vector<float>{0, 0, 2, 2});
}

TEST_CASE("a used input receives the sum of its paths", "[autograd]") {
  Tensor x = leaf({2}, {1});
  Tensor y = x * x + x * 3.0 + exp(x) * 0.0;
  y.backward();
  CHECK(x.grad().item<float>() == Approx(7.0f));
}

TEST_CASE("backward twice needs retain_graph", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(exp(x));
  y.backward(Tensor(), true);
  y.backward();
  CHECK(x.grad().to_vector<float>()[0] == Approx(2 * std::exp(1.0f)));
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("second time") && Catch::Contains("retain_graph"));
}

TEST_CASE("modifying a saved tensor in place is caught in backward", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = x * 2.0;
  Tensor y = exp(h);  // saves its output
  y.mul_(3.0);        // changes the saved output
  CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("exp") && Catch::Contains("in-place") &&
                                           Catch::Contains("version"));
}

TEST_CASE("in-place ops on non-leaves are differentiated", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  y.add_(x);       // y = 3x
  y.mul_(y.detach() * 0.0 + 2.0);  // y = 6x
  sum(y).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 6, 6});
  Tensor z = leaf({1}, {1});
  CHECK_THROWS_WITH(z.add_(1.0), Catch::Contains("leaf") && Catch::Contains("add_"));
  {
    NoGradGuard g;
    z.add_(1.0);  // allowed without grad mode: optimizers work like this
  }
  CHECK(z.item<float>() == 2.0f);
}

TEST_CASE("no_grad, detach and requires_grad rules", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
  }
  Tensor d = x.detach();
  CHECK(!d.requires_grad());
  CHECK(d.storage() == x.storage());
  CHECK_THROWS_AS(zeros({2}, DType::Int64).set_requires_grad(true), DTypeError);
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.set_requires_grad(false), AutogradError);
  CHECK_THROWS_WITH(zeros({2}).sum().backward(), Catch::Contains("does not require grad"));
  CHECK_THROWS_WITH(sum(x * 1.0, {}, true).expand({3, 2}).backward(), Catch::Contains("one-element"));
}

TEST_CASE("tensor hooks, retain_grad and post-accumulate hooks", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = x * 3.0;
  h.retain_grad();
  h.register_hook([](const Tensor& g) { return g * 10.0; });  // scales what flows below h
  std::vector<float> seen;
  x.register_post_accumulate_grad_hook([&](Tensor& t) { seen = t.grad().to_vector<float>(); });
  sum(h * h).backward();
  // dL/dh = 2h = (6, 12); retain_grad records it before the scaling hook added after it? Hooks
  // run in registration order: retain_grad's hook came first.
  CHECK(h.grad().to_vector<float>() == std::vector<float>{6, 12});
  CHECK(x.grad().to_vector<float>() == std::vector<float>{180, 360});
  CHECK(seen == std::vector<float>{180, 360});
}

TEST_CASE("end-of-backward callbacks run once after all nodes", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  int calls = 0;
  bool grad_ready = false;
  x.register_post_accumulate_grad_hook([&](Tensor&) {
    queue_backward_callback([&] {
      ++calls;
      grad_ready = x.grad().defined();
    });
  });
  sum(x * x).backward();
  CHECK(calls == 1);
  CHECK(grad_ready);
  CHECK_THROWS_AS(queue_backward_callback([] {}), AutogradError);
  CHECK_THROWS_AS(queue_outer_backward_callback([] {}), AutogradError);
}

TEST_CASE("a backward nested in another: callbacks for the current pass end it, for the outer pass the outer one",
          "[autograd]") {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = leaf({3, 4}, {2});
  Tensor c = leaf({5, 6}, {2});
  std::vector<std::string> events;
  b.register_post_accumulate_grad_hook([&](Tensor&) {
    queue_backward_callback([&] { events.push_back("inner end"); });
    queue_outer_backward_callback([&] { events.push_back("outer end"); });
  });
  a.register_post_accumulate_grad_hook([&](Tensor&) {
    events.push_back("a");
    EnableGradGuard grad_mode;  // backward runs without grad mode
    sum(b * b).backward();      // a backward of its own, inside this one
  });
  c.register_post_accumulate_grad_hook([&](Tensor&) { events.push_back("c"); });
  // The engine runs the branch recorded last first, so a's accumulation comes before c's, which then
  // comes after the nested pass has ended: the outer pass's callback must wait for it. (Separate
  // statements: the operands of one + may be evaluated in either order, and compilers differ.)
  const Tensor c_term = c * c;
  const Tensor a_term = a * a * 2.0;
  sum(a_term + c_term).backward();
  CHECK(events == std::vector<std::string>{"a", "inner end", "c", "outer end"});
  // Once a pass is over, the next outermost pass is a new one.
  events.clear();
  sum(b * b).backward();
  CHECK(events == std::vector<std::string>{"inner end", "outer end"});
}

TEST_CASE("anomaly mode names the op whose backward made a NaN", "[autograd]") {
  Tensor x = leaf({0, 1}, {2});
  {
    Tensor y = sum(sqrt(x) * 0.0);  // d sqrt at 0 is inf; times 0 gives NaN in sqrt's backward
    CHECK_NOTHROW(y.backward());     // off by default: no check
  }
  AnomalyModeGuard on;
  Tensor y = sum(sqrt(x) * 0.0);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("anomaly") && Catch::Contains("sqrt"));
}

TEST_CASE("anomaly mode checks NaN only: infinite gradients pass, a NaN among them does not", "[autograd]") {
  AnomalyModeGuard on;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float64}) {
    INFO(dtype_name(t));
    Tensor x = tensor<float>({0, 1, 4}, {3}).to(t).set_requires_grad(true);
    CHECK_NOTHROW(sum(sqrt(x)).backward());  // d sqrt at 0 is +inf
    CHECK(std::isinf(x.grad().to(DType::Float64).to_vector<double>()[0]));
    // -inf and +inf beside a NaN: the check must not depend on where the NaN sits.
    Tensor z = tensor<float>({0, 1, 4}, {3}).to(t).set_requires_grad(true);
    Tensor w = tensor<float>({-1, NAN, 1}, {3}).to(t);
    CHECK_THROWS_WITH(sum(sqrt(z) * w).backward(), Catch::Contains("anomaly") && Catch::Contains("mul"));
  }
}

TEST_CASE("grad() returns gradients without touching .grad", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = sum(x * x);
  TensorList g = grad({y}, {x});
  CHECK(g[0].to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(!x.grad().defined());
  Tensor unused = leaf({1}, {1});
  Tensor z = sum(x * 2.0);
  CHECK_THROWS_WITH(grad({z}, {unused}), Catch::Contains("not used"));
}

TEST_CASE("grad() runs only the graph between outputs and inputs: the part below keeps its state", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor a = exp(x);
  int below = 0;
  a.register_hook([&](const Tensor&) {
    ++below;
    return Tensor();
  });
  a.retain_grad();
  Tensor y = a * 3.0;
  Tensor z = sum(y * y);
  const TensorList g = grad({z}, {y});
  CHECK(g[0].to_vector<float>() == (y * 2.0).to_vector<float>());
  CHECK(below == 0);               // a's hook is below y: not run
  CHECK(!a.grad().defined());      // nor its retained gradient set
  CHECK(!x.grad().defined());
  sum(y).backward();  // exp's saved tensors are still there (before: freed, and this threw)
  CHECK(below == 1);
  CHECK(x.grad().to_vector<float>() == (exp(x.detach()) * 3.0).to_vector<float>());
  // An input below another input: the path between them runs, once.
  Tensor u = leaf({2}, {1});
  Tensor v = u * 4.0;
  Tensor out = sum(v * u);
  const TensorList both = grad({out}, {v, u});
  CHECK(both[0].item<float>() == 2.0f);
  CHECK(both[1].item<float>() == 16.0f);  // v + 4u
}

TEST_CASE("grad() runs a leaf input's hooks, not its post-accumulate hooks", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor w = leaf({5}, {1});
  int seen = 0, accumulated = 0, w_seen = 0;
  x.register_hook([&](const Tensor& g) {
    ++seen;
    return g * 10.0;
  });
  x.register_hook([&](const Tensor& g) {
    ++seen;
    CHECK(g.to_vector<float>() == std::vector<float>{100, 200, 300});  // after the first hook
    return Tensor();
  });
  x.register_post_accumulate_grad_hook([&](Tensor&) { ++accumulated; });
  w.register_hook([&](const Tensor& g) {
    ++w_seen;
    return g;
  });
  Tensor y = sum(x * x * w.expand({3}));
  TensorList g = grad({y}, {x}, {}, /*retain_graph=*/true);
  CHECK(g[0].to_vector<float>() == std::vector<float>{100, 200, 300});
  CHECK(seen == 2);
  CHECK(accumulated == 0);
  CHECK(w_seen == 0);  // not an input: its gradient is not taken
  CHECK(!x.grad().defined());
  y.backward();  // the same hooks in backward, for comparison
  CHECK(x.grad().to_vector<float>() == std::vector<float>{100, 200, 300});
  CHECK(seen == 4);
  CHECK(accumulated == 1);
}

TEST_CASE("backward order is deterministic", "[autograd]") {
  // Two runs of the same graph give bitwise-identical gradients.
  auto run = [] {
    manual_seed(5);
    Tensor x = randn({64, 33}).set_requires_grad(true);
    Tensor y = sum(tanh(x) * sigmoid(x) + exp(x * 0.1) * gelu(x));
    y.backward();
    return x.grad().to_vector<float>();
  };
  CHECK(run() == run());
}

TEST_CASE("to(dtype) is differentiable and casts the gradient back", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(x.to(DType::Float64) * 2.0);
  y.backward();
  CHECK(x.grad().dtype() == DType::Float32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2});
  Tensor h = x.to(DType::BFloat16);
  sum(h * h).backward();
  CHECK(x.grad().dtype() == DType::Float32);
}

TEST_CASE("split's pieces share one node, and a piece without a gradient gets zeros", "[autograd]") {
  // x is [2, 5] split along dim 1 into 2, 1 and 2 columns; the loss uses pieces 0 and 2 only, and
  // piece 2 twice, so its gradient arrives as a sum.
  Tensor x = leaf({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  TensorList p = split_with_sizes(x * 1.0, {2, 1, 2}, 1);
  REQUIRE(p.size() == 3);
  CHECK(p[0].grad_fn() == p[1].grad_fn());
  CHECK(p[1].grad_fn() == p[2].grad_fn());
  CHECK(p[0].grad_fn()->name() == "split");
  CHECK(p[0].grad_fn()->next_edges().size() == 1);
  Tensor loss = sum(p[0] * 3.0) + sum(p[2] * p[2]) + sum(p[2]);
  loss.backward();
  // d/dx: 3 on piece 0's columns, 0 on piece 1's, 2 x + 1 on piece 2's.
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 3, 0, 7, 9, 3, 3, 0, 17, 19});
  // A leaf split directly: the pieces' history leads straight to its accumulator.
  Tensor y = leaf({1, 2, 3, 4}, {4});
  TensorList q = split(y, 3);
  sum(q[1] * 5.0).backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 5});
  // Under NoGradGuard the pieces are plain views without history.
  NoGradGuard no_grad;
  CHECK(split(y, 2)[0].grad_fn() == nullptr);
}

TEST_CASE("gradcheck catches a wrong gradient", "[autograd]") {
  Tensor x = tensor({0.3, -0.7, 1.1}, {3}, TensorOptions(DType::Float64)).set_requires_grad(true);
  auto good = gradcheck([](const TensorList& in) { return TensorList{tanh(in[0]) * in[0]}; }, {x});
  CHECK(good.ok);
  // A deliberately wrong backward through a hook: doubles the gradient.
  auto bad = gradcheck(
      [](const TensorList& in) {
        Tensor y = in[0] * 1.0;
        if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g * 2.0; });
        return TensorList{y * y};
      },
      {x});
  CHECK(!bad.ok);
  CHECK(bad.message.find("input 0") != std::string::npos);
}

TEST_CASE("split's backward passes on pieces that already make up one buffer, and copies others", "[autograd]") {
  // Hooks replace the pieces' gradients with views of one buffer g: in order they are g itself.
  Tensor x = leaf({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  Tensor g = tensor(std::vector<float>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, {2, 5});
  auto run = [&](const std::vector<std::pair<int64_t, int64_t>>& places) {
    Tensor y = x * 1.0;
    Tensor seen;
    y.register_hook([&seen](const Tensor& grad) {
      seen = grad;
      return Tensor();
    });
    TensorList p = split_with_sizes(y, {2, 1, 2}, 1);
    for (size_t i = 0; i < p.size(); ++i) {
      const int64_t start = places[i].first, len = places[i].second;  // (clang: no captured bindings)
      p[i].register_hook([&g, start, len](const Tensor&) { return g.narrow(1, start, len); });
    }
    (sum(p[0]) + sum(p[1]) + sum(p[2])).backward();
    return seen;
  };
  Tensor joined = run({{0, 2}, {2, 1}, {3, 2}});
  CHECK(joined.storage() == g.storage());
  CHECK(joined.to_vector<float>() == g.to_vector<float>());
  // Pieces 0 and 2 swapped (lengths fit, places do not): a copy with the values where they belong.
  Tensor copied = run({{3, 2}, {2, 1}, {0, 2}});
  CHECK(copied.storage() != g.storage());
  CHECK(copied.to_vector<float>() == std::vector<float>{13, 14, 12, 10, 11, 18, 19, 17, 15, 16});
}

// Gradients PyTorch defines where the plain formula is 0 * inf or 0 / 0 (each was NaN once).
TEST_CASE("pow, max and min gradients at zero bases, zero exponents and NaN", "[autograd]") {
  SECTION("d/de 0^e is 0 for e >= 0") {
    Tensor e = tensor(std::vector<double>{0.0, 1.0, 2.5}).set_requires_grad(true);
    sum(pow(Scalar(0.0), e)).backward();
    CHECK(e.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0});
    Tensor e2 = tensor(std::vector<double>{1.0, 2.0}).set_requires_grad(true);
    sum(pow(Scalar(2.0), e2)).backward();  // 2^e log 2
    CHECK(e2.grad().to_vector<double>()[1] == Approx(4.0 * std::log(2.0)));
  }
  SECTION("d/db b^e is 0 where e == 0, b == 0 included") {
    Tensor b = tensor(std::vector<double>{0.0, 0.0, 3.0}).set_requires_grad(true);
    Tensor e = tensor(std::vector<double>{0.0, 2.0, 0.0}).set_requires_grad(true);
    sum(pow(b, e)).backward();
    CHECK(b.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0});
    CHECK(e.grad().to_vector<double>()[0] == 0.0);  // 0^0 log 0: defined as 0 (e >= 0)
  }
  SECTION("a NaN that is the maximum takes the gradient") {
    Tensor x = tensor(std::vector<double>{1.0, NAN, 3.0}).set_requires_grad(true);
    max(x).backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{0.0, 1.0, 0.0});
    Tensor y = tensor(std::vector<double>{NAN, 2.0, NAN}).set_requires_grad(true);
    min(y).backward();  // two NaNs tie
    CHECK(y.grad().to_vector<double>() == std::vector<double>{0.5, 0.0, 0.5});
    Tensor z = tensor(std::vector<double>{1.0, 4.0, 4.0}).set_requires_grad(true);
    max(z).backward();  // ties without NaN still split evenly
    CHECK(z.grad().to_vector<double>() == std::vector<double>{0.0, 0.5, 0.5});
  }
  SECTION("a maximum along a dim of a tensor with another, empty dim is empty") {
    Tensor x = ones({0, 3});
    CHECK(amax(x, Shape{1}).sizes() == Shape{0});
    CHECK(argmax(x, 1).sizes() == Shape{0});
    CHECK(max(x, 1).first.sizes() == Shape{0});
    CHECK(min(x, 1).second.sizes() == Shape{0});
    CHECK_THROWS_AS(amax(x, Shape{0}), ShapeError);  // nothing to take the maximum of
    CHECK_THROWS_AS(max(x), ShapeError);
  }
}

// In-place products and quotients whose operand is self: the backward uses the operand as it was.
// (Once the saved operand was the updated self, and x.mul_(x) gave x's gradient 2x^2 for 2x.)
TEST_CASE("in-place mul_ and div_ by self differentiate the values before the write", "[autograd]") {
  Tensor x = tensor(std::vector<double>{1.0, 2.0, 3.0}).set_requires_grad(true);
  Tensor y = x * 1.0;
  y.mul_(y);  // x^2
  sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 4.0, 6.0});
  Tensor z = tensor(std::vector<double>{1.0, 2.0, 4.0}).set_requires_grad(true);
  Tensor w = z * 3.0;
  w.div_(w);  // 1
  CHECK(w.to_vector<double>() == std::vector<double>{1.0, 1.0, 1.0});
  sum(w).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0.0, 0.0, 0.0});
}

// Where check_no_overlap cannot decide (either side not dense), the op reads a copy of the input:
// a transposed self of a block of a matrix gave order-dependent values, 6 of 16 wrong.
TEST_CASE("in-place writes from an operand whose memory meets a non-dense self read it as it was", "[tensor]") {
  auto block = [] { return arange(0, 32, 1, TensorOptions(DType::Float32)).view({4, 8}).narrow(1, 0, 4); };
  auto transposed = [](const std::vector<float>& v) {
    std::vector<float> t(16);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) t[static_cast<size_t>(i * 4 + j)] = v[static_cast<size_t>(j * 4 + i)];
    }
    return t;
  };
  Tensor x = block();
  const std::vector<float> before = x.to_vector<float>();
  x.copy_(x.t());
  CHECK(x.to_vector<float>() == transposed(before));
  Tensor a = block();
  a.add_(a.t());
  Tensor b = block();
  b.mul_(b.t());
  Tensor c = block() + 1.0;  // no zeros to divide by; contiguous, so take a block of a wider copy
  Tensor wide = zeros({4, 8});
  wide.narrow(1, 0, 4).copy_(c);
  Tensor d = wide.narrow(1, 0, 4);
  d.div_(d.t());
  const std::vector<float> tb = transposed(before);
  const std::vector<float> cv = c.to_vector<float>(), tc = transposed(cv);
  for (size_t k = 0; k < 16; ++k) {
    CHECK(a.to_vector<float>()[k] == before[k] + tb[k]);
    CHECK(b.to_vector<float>()[k] == before[k] * tb[k]);
    CHECK(d.to_vector<float>()[k] == cv[k] / tc[k]);
  }
  // A dense self and a non-dense operand that meets it.
  Tensor s = arange(0, 32, 1, TensorOptions(DType::Float32));
  Tensor dense = s.narrow(0, 0, 16).view({4, 4});
  Tensor strided = s.as_strided({4, 4}, {1, 8}, 0);
  const std::vector<float> want = strided.to_vector<float>();
  dense.copy_(strided);
  CHECK(dense.to_vector<float>() == want);
  // Interleaved views share no element: still allowed, and exact.
  Tensor pairs = arange(0, 8, 1, TensorOptions(DType::Float32)).view({4, 2});
  pairs.select(1, 0).add_(pairs.select(1, 1));
  CHECK(pairs.to_vector<float>() == std::vector<float>{1, 1, 5, 3, 9, 5, 13, 7});
}

// Writes whose result would depend on the order of the writes are refused, as PyTorch refuses them.
TEST_CASE("in-place writes into shared or self-overlapping memory are refused", "[tensor]") {
  Tensor x = arange(0, 4, 1, TensorOptions(DType::Float32)).view({2, 2});
  CHECK_THROWS_WITH(x.copy_(x.t()), Catch::Contains("copy_: an input") && Catch::Contains("clone() the input first"));
  Tensor r = arange(0, 6, 1, TensorOptions(DType::Float32));
  CHECK_THROWS_WITH(r.narrow(0, 1, 5).add_(r.narrow(0, 0, 5)), Catch::Contains("add_: an input"));
  CHECK(r.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});  // refused before any write
  Tensor one = zeros({1});
  Tensor e = one.expand({3});
  CHECK_THROWS_WITH(e.add_(tensor(std::vector<float>{1, 2, 3})), Catch::Contains("add_: several elements"));
  CHECK_THROWS_AS(e.mul_(2.0), Error);
  CHECK_THROWS_AS(e.copy_(tensor(std::vector<float>{1, 2, 3})), Error);
  // Where the order of the aliases' writes decides the result: a masked fill (a later row's zero
  // overwrote an earlier row's fill), random draws (threads raced, a fixed seed gave other sums).
  Tensor rows = zeros({3}).expand({2, 3});
  const Tensor mask = tensor(std::vector<bool>{true, false, true, false, false, false}, {2, 3});
  CHECK_THROWS_WITH(rows.masked_fill_(mask, 5.0), Catch::Contains("masked_fill_: several elements"));
  CHECK_THROWS_WITH(rows.uniform_(), Catch::Contains("uniform_: several elements"));
  CHECK_THROWS_WITH(rows.normal_(), Catch::Contains("normal_: several elements"));
  CHECK_THROWS_WITH(rows.clamp_(0.0, 1.0), Catch::Contains("clamp_: several elements"));
  // What stays allowed: self as its own operand, disjoint parts of one buffer, and copies of views.
  Tensor s = tensor(std::vector<float>{1, 2, 3, 4});
  s.mul_(s);
  CHECK(s.to_vector<float>() == std::vector<float>{1, 4, 9, 16});
  s.narrow(0, 0, 2).add_(s.narrow(0, 2, 2));
  CHECK(s.to_vector<float>() == std::vector<float>{10, 20, 9, 16});
  Tensor t = arange(0, 4, 1, TensorOptions(DType::Float32)).view({2, 2});
  t.copy_(t.t().clone());
  CHECK(t.to_vector<float>() == std::vector<float>{0, 2, 1, 3});
  e.fill_(7);  // the same value everywhere: the order does not matter
  CHECK(one.item<float>() == 7.0f);
}

TEST_CASE("a view taken under NoGradGuard of a tensor that requires grad is not changed in place with grad on",
          "[autograd]") {
  // Its change would reach x's values but not x's history: a.grad would come out half of d/da.
  Tensor a = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
  Tensor x = a * 1.0;
  Tensor v, w;
  {
    NoGradGuard no_grad;
    v = x.view({3});
    w = v.narrow(0, 0, 2);  // a view of such a view
  }
  CHECK_THROWS_WITH(v.mul_(2.0), Catch::Contains("mul_") && Catch::Contains("taken under NoGradGuard"));
  CHECK_THROWS_AS(w.add_(1.0), AutogradError);
  {
    NoGradGuard no_grad;
    v.mul_(2.0);  // under NoGradGuard: the caller's own business, as before
  }
  CHECK(x.to_vector<double>() == std::vector<double>{2, 4, 6});
  // A view of a tensor that does not require grad stays free.
  Tensor plain = tensor(std::vector<double>{1, 2});
  Tensor pv;
  {
    NoGradGuard no_grad;
    pv = plain.view({2});
  }
  pv.mul_(3.0);
  CHECK(plain.to_vector<double>() == std::vector<double>{3, 6});
}

TEST_CASE("a hook may change a gradient's values, not its shape, dtype or device", "[autograd]") {
  Tensor x = tensor(std::vector<float>{1, 2, 3}).set_requires_grad(true);
  x.register_hook([](const Tensor&) { return full({}, 6.0); });  // a scalar for a [3] gradient
  CHECK_THROWS_WITH((x * 2.0).sum().backward(), Catch::Contains("register_hook: a hook on a leaf returned") &&
                                                    Catch::Contains("[]") && Catch::Contains("[3]"));
  Tensor w = tensor(std::vector<float>{1, 2, 3}).set_requires_grad(true);
  w.register_hook([](const Tensor& g) { return g.to(DType::Float64); });
  CHECK_THROWS_WITH((w * 2.0).sum().backward(), Catch::Contains("float64") && Catch::Contains("float32"));
  Tensor y = tensor(std::vector<float>{1, 2}).set_requires_grad(true);
  Tensor z = y * 2.0;
  z.register_hook([](const Tensor& g) { return g.reshape({2, 1}); });
  CHECK_THROWS_WITH(z.sum().backward(), Catch::Contains("a hook on a tensor returned") && Catch::Contains("[2, 1]"));
  // Values may change.
  Tensor ok = tensor(std::vector<float>{1, 2}).set_requires_grad(true);
  ok.register_hook([](const Tensor& g) { return g * 10.0; });
  (ok * 2.0).sum().backward();
  CHECK(ok.grad().to_vector<float>() == std::vector<float>{20, 20});
}

TEST_CASE("retain_grad keeps the gradient of the tensor's current value after an in-place op", "[autograd]") {
  Tensor x = ones({3}).set_requires_grad(true);
  Tensor y = x * 2.0;
  y.retain_grad();
  y.mul_(3.0);
  y.sum().backward();
  CHECK(y.grad().to_vector<float>() == std::vector<float>{1, 1, 1});  // not 3, the gradient before mul_
  CHECK(x.grad().to_vector<float>() == std::vector<float>{6, 6, 6});
}

TEST_CASE("set_data gives the tensor a new gradient sink and advances its version", "[autograd]") {
  // A graph kept alive (a logged loss) holds the old sink: gradients must not be rounded to the old
  // dtype afterwards, and a cast cached from the old values must not be served.
  Tensor w = tensor(std::vector<float>{1, 2}).set_requires_grad(true);
  Tensor kept = (w * 3.0).sum();
  kept.backward(Tensor(), /*retain_graph=*/true);
  const uint64_t before = w.version();
  w.set_data(tensor(std::vector<double>{5, 7}));
  CHECK(w.version() > before);
  CHECK_FALSE(w.grad().defined());
  (w * 2.0).sum().backward();
  CHECK(w.grad().dtype() == DType::Float64);
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2, 2});
  // The old graph saved nothing of w's values here (w * 3 saves the scalar only); a graph that did is
  // refused, as after any change of the values.
  Tensor v = tensor(std::vector<float>{1, 2}).set_requires_grad(true);
  Tensor sq = (v * v).sum();
  v.set_data(tensor(std::vector<float>{3, 4}));
  CHECK_THROWS_AS(sq.backward(), AutogradError);
  Tensor c = tensor(std::vector<float>{1, 1}).set_requires_grad(true);
  Tensor m = full({2, 2}, 1.0);
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    CHECK(matmul(c.view({1, 2}), m).to_vector_double() == std::vector<double>{2, 2});
    c.set_data(tensor(std::vector<float>{5, 5}));
    CHECK(matmul(c.view({1, 2}), m).to_vector_double() == std::vector<double>{10, 10});  // not the cached cast
  }
}

TEST_CASE("gradcheck refuses an input whose elements share memory", "[autograd]") {
  Tensor expanded = tensor(std::vector<double>{1, 2, 3}).view({1, 3}).expand({2, 3}).detach().set_requires_grad(true);
  CHECK_THROWS_WITH(gradcheck([](const TensorList& in) { return TensorList{mul(in[0], in[0])}; }, {expanded}),
                    Catch::Contains("gradcheck: input 0") && Catch::Contains("share memory"));
  // Gaps are fine (a view of a fused buffer): each element still has its own place.
  Tensor fused = tensor(std::vector<double>{0.5, -1, 2, 0.25, 3, -0.5, 1, 1.5}, {2, 4});
  Tensor gapped = fused.narrow(1, 1, 2).detach().set_requires_grad(true);
  CHECK(gradcheck([](const TensorList& in) { return TensorList{mul(in[0], in[0])}; }, {gapped}).ok);
}

TEST_CASE("copy_ into an integer tensor ends the graph, as a cast to it does", "[autograd]") {
  Tensor b = tensor(std::vector<float>{1.5, 2.5, 3.5}).set_requires_grad(true);
  Tensor a = zeros({3}, DType::Int64);
  a.copy_(b);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK_FALSE(a.requires_grad());
  CHECK(a.grad_fn() == nullptr);
  // A float destination keeps its history.
  Tensor f = zeros({3});
  f.copy_(b);
  CHECK(f.requires_grad());
}

TEST_CASE("more dims than a kernel takes is a ShapeError naming the op, not a write past its arrays", "[tensor]") {
  Shape shape(13, 1);
  shape[0] = 3;
  shape[12] = 2;
  const Tensor x = arange(0, 6, 1, TensorOptions(DType::Float32)).view(shape);
  CHECK_THROWS_WITH(sum(x), Catch::Contains("sum") && Catch::Contains("at most 12 dimensions"));
  CHECK_THROWS_AS(amax(x, {0}), ShapeError);
  CHECK(sum(x.reshape({6})).item<float>() == 15.0f);
  // Every kernel argument names the op that builds it: a factory, an elementwise op, a copy.
  auto names = [](const std::string& op) {
    return Catch::StartsWith(op + ": kiln supports at most 12 dimensions in a kernel");
  };
  CHECK_THROWS_WITH(ones(shape), names("ones"));
  CHECK_THROWS_WITH(exp(x), names("exp"));
  CHECK_THROWS_WITH(x + 1.0, names("add"));
  CHECK_THROWS_WITH(x.clone(), names("clone"));
  CHECK_THROWS_WITH(where(x > 0.0, x, 0.0), names("gt"));
}

TEST_CASE("cat gives the 1-d empty inputs it skips an empty gradient, in their dtype", "[autograd]") {
  Tensor e = zeros({0}, DType::Float64), b = ones({2, 3});
  e.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor out = cat({e, b, e}, 0);
  REQUIRE(out.sizes() == Shape{2, 3});
  (out * 2.0).sum().backward();
  REQUIRE(e.grad().defined());
  CHECK(e.grad().sizes() == Shape{0});
  CHECK(e.grad().dtype() == DType::Float64);
  CHECK(b.grad().sum().item<double>() == 12.0);
}

TEST_CASE("max and amax share a 16-bit gradient among more ties than float16 can count", "[autograd]") {
  for (const DType dt : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(dt));
    Tensor x = zeros({70000}, dt);  // e.g. a ReLU output that is all zeros
    x.set_requires_grad(true);
    max(x).backward();
    const std::vector<double> g = x.grad().to_vector_double();
    const double share = static_cast<double>(full({}, 1.0 / 70000, TensorOptions(dt)).item<float>());
    CHECK(share > 0.0);
    CHECK(std::count(g.begin(), g.end(), share) == 70000);  // before: 0 in float16 (the count was inf)
  }
}

TEST_CASE("var divides by max(0, n - correction): inf past n, with a gradient to match", "[autograd]") {
  Tensor x = tensor(std::vector<double>{1.0, 2.0}).to(DType::Float64);
  x.set_requires_grad(true);
  for (const double correction : {2.0, 3.0}) {
    INFO("correction " << correction);
    x.set_grad(Tensor());
    Tensor v = var(x, {}, correction);
    CHECK(std::isinf(v.item<double>()));
    v.backward();
    const std::vector<double> g = x.grad().to_vector_double();
    CHECK((std::isinf(g[0]) && g[0] < 0));  // 2 (x - mean) / 0: -inf, +inf
    CHECK((std::isinf(g[1]) && g[1] > 0));
  }
  CHECK(std::isnan(var(ones({3}), {}, 3.0).item<float>()));  // 0 / 0
  CHECK(std::isnan(var(zeros({0})).item<float>()));
}

TEST_CASE("a .grad replaced through mutable_grad() must match its leaf when backward accumulates", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  x.mutable_grad() = zeros({2, 3});  // would take the gradient broadcast, silently
  CHECK_THROWS_WITH(sum(x * 2.0).backward(),
                    Catch::Contains("AccumulateGrad") && Catch::Contains("[2, 3]") && Catch::Contains("[3]"));
  x.mutable_grad() = zeros({3}, DType::Float64);  // would stay float64
  CHECK_THROWS_WITH(sum(x * 2.0).backward(), Catch::Contains("float64") && Catch::Contains("float32"));
  x.mutable_grad() = ones({3});  // a matching one accumulates
  sum(x * 2.0).backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3, 3, 3});
}

// Backward passes on two threads into one leaf: each accumulation holds the leaf's lock, so every
// gradient is added once (without it the two threads raced on .grad: a first gradient stored twice
// over, or an add lost). Exact integers, so the sum is exact. The [parallel] tag runs it under
// ThreadSanitizer too (tools/sanitize.sh --thread).
TEST_CASE("autograd: backward on two threads into one shared leaf adds every gradient", "[autograd][parallel]") {
  Tensor w = zeros({256});
  w.set_requires_grad(true);
  constexpr int kRounds = 300;
  const auto run = [&](double k) {
    for (int i = 0; i < kRounds; ++i) sum(mul(w, k)).backward();
  };
  for (int trial = 0; trial < 3; ++trial) {
    w.set_grad(Tensor());
    std::thread a(run, 1.0), b(run, 2.0);
    a.join();
    b.join();
    REQUIRE(w.grad().defined());
    const std::vector<float> g = w.grad().to_vector<float>();
    CHECK(std::all_of(g.begin(), g.end(), [](float v) { return v == 3.0f * kRounds; }));
  }
}

TEST_CASE("a view taken before an in-place op on its base follows the base's new history", "[autograd]") {
  // PyTorch regenerates such a view's grad_fn from its base's current one; a view that kept its old
  // history sent its gradient past the in-place op (x.grad 1 where it is 2), silently.
  auto grad_of_x = [](const std::function<Tensor(const Tensor&)>& loss, std::vector<double> values) {
    Tensor x = tensor(values).set_requires_grad(true);
    loss(x).backward();
    return x.grad().to_vector<double>();
  };
  SECTION("a slice, a view of it, a transpose and an expand of the base") {
    Tensor x = tensor(std::vector<double>{1, 2, 3, 4}).set_requires_grad(true);
    Tensor y = x * 1.0;
    Tensor v = y.slice(0, 1, 3);
    Tensor s = v.select(0, 1);                // a view of a view: its base is y too
    Tensor m = y.view({2, 2}).t();            // m[i][j] = y[2j + i]
    Tensor e = y.slice(0, 0, 1).expand({3});  // three aliases of y[0]
    y.mul_(2.0);
    CHECK(v.to_vector<double>() == std::vector<double>{4, 6});
    CHECK(v.grad_fn()->name() == "ViewOfBaseBackward");
    Tensor w = tensor(std::vector<double>{1, 10, 100, 1000}).view({2, 2});
    (v.sum() + s * 7.0 + (m * w).sum() + e.sum()).backward();
    // Each through y = 2x: v adds 2 at 1 and 2, s 7 * 2 at 2, m 2 * w[i][j] at 2j + i, e 6 at 0.
    CHECK(x.grad().to_vector<double>() == std::vector<double>{2 + 6, 2 + 200, 2 + 14 + 20, 2000});
  }
  SECTION("a view whose positions overlap: each element gets the sum of its positions' gradients") {
    Tensor x = tensor(std::vector<double>{1, 2, 3, 4}).set_requires_grad(true);
    Tensor y = zeros({4}, TensorOptions(DType::Float64));
    Tensor v = y.as_strided({3, 2}, {1, 1}, 0);  // v[i][j] = y[i + j]
    y.add_(x);
    Tensor w = tensor(std::vector<double>{1, 10, 100, 1000, 10000, 100000}).view({3, 2});
    (v * w).sum().backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 10 + 100, 1000 + 10000, 100000});
  }
  SECTION("a base that did not require grad when the view was taken") {
    // v had no history at all: it now requires grad and takes part in backward (and an in-place op
    // on it goes into y's history: v = 2x there).
    CHECK(grad_of_x(
              [](const Tensor& x) {
                Tensor y = zeros({4}, TensorOptions(DType::Float64));
                Tensor v = y.slice(0, 0, 2);
                CHECK_FALSE(v.requires_grad());
                y.add_(x);
                CHECK(v.requires_grad());
                v.mul_(2.0);
                return (v * v).sum();
              },
              {3, 5, 7, 9}) == std::vector<double>{24, 40, 0, 0});
  }
  SECTION("an in-place op whose operand requires grad: the view's gradient reaches it") {
    Tensor x = tensor(std::vector<double>{0.3, -0.7, 1.1}).set_requires_grad(true);
    auto fn = [](const TensorList& in) {
      Tensor y = in[0] * 1.0;
      Tensor v = y.slice(0, 0, 2);
      y.mul_(in[0]);  // y = x^2
      return TensorList{v * 3.0};
    };
    auto result = gradcheck(fn, {x});
    CHECK(result.ok);
    INFO(result.message);
  }
  SECTION("hooks and retain_grad on the view move to its new history") {
    Tensor x = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
    Tensor y = x * 1.0;
    Tensor v = y.slice(0, 0, 2);
    v.register_hook([](const Tensor& g) { return g * 10.0; });
    v.retain_grad();
    y.mul_(2.0);
    v.sum().backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{20, 20, 0});
    CHECK(v.grad().to_vector<double>() == std::vector<double>{10, 10});
  }
  SECTION("a base changed under NoGradGuard keeps the view's history") {
    Tensor x = tensor(std::vector<double>{1, 2, 3}).set_requires_grad(true);
    Tensor y = x * 1.0;
    Tensor v = y.slice(0, 0, 2);
    const Node* before = v.grad_fn().get();
    {
      NoGradGuard no_grad;
      y.mul_(2.0);
    }
    CHECK(v.grad_fn().get() == before);
    CHECK(v.to_vector<double>() == std::vector<double>{2, 4});
  }
  SECTION("a view made a leaf that requires grad keeps its own gradient") {
    Tensor w = tensor(std::vector<double>{1, 2}).set_requires_grad(true);
    Tensor buf = zeros({4}, TensorOptions(DType::Float64));
    Tensor leaf_view = buf.slice(0, 0, 2).set_requires_grad(true);
    buf.slice(0, 2, 4).add_(w);  // buf gets a history
    CHECK(leaf_view.is_leaf());
    (leaf_view * 3.0).sum().backward();
    CHECK(leaf_view.grad().to_vector<double>() == std::vector<double>{3, 3});
  }
  SECTION("a detach() alias and a view of it have no history to take") {
    Tensor x = tensor(std::vector<double>{1, 2}).set_requires_grad(true);
    Tensor y = x * 1.0;
    Tensor d = y.detach().slice(0, 0, 1);
    y.mul_(x);
    CHECK_FALSE(d.requires_grad());
    CHECK(d.item<double>() == 1.0);
  }
}

TEST_CASE("in-place ops on views change their base's history", "[autograd]") {
  const TensorOptions f64(DType::Float64);
  SECTION("a slice scaled in place") {
    Tensor x = tensor(std::vector<double>{1, 2, 3, 4}).set_requires_grad(true);
    Tensor y = x * 1.0;
    y.slice(0, 1, 3).mul_(3.0);
    CHECK(y.grad_fn()->name() == "mul_ on a view");
    (y * tensor(std::vector<double>{1, 10, 100, 1000})).sum().backward();
    CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 30, 300, 1000});
  }
  SECTION("a buffer assembled by copy_ into its slices") {
    Tensor a = tensor(std::vector<double>{1, 2}).set_requires_grad(true);
    Tensor b = tensor(std::vector<double>{3, 4}).set_requires_grad(true);
    Tensor buf = zeros({5}, f64);
    buf.slice(0, 0, 2).copy_(a);
    buf.slice(0, 3, 5).copy_(b * 2.0);
    CHECK(buf.to_vector<double>() == std::vector<double>{1, 2, 0, 6, 8});
    (buf * tensor(std::vector<double>{1, 10, 100, 1000, 10000})).sum().backward();
    CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 10});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{2000, 20000});
  }
  SECTION("a view written from another view of its base, then both used with the base") {
    // y = [x0 + x2, x1 + x3, x2, x3]; the source view's history is regenerated after the write.
    Tensor x = tensor(std::vector<double>{1, 2, 3, 4}).set_requires_grad(true);
    Tensor y = x * 1.0;
    Tensor head = y.slice(0, 0, 2), tail = y.slice(0, 2, 4);
    head.add_(tail);
    Tensor w = tensor(std::vector<double>{1, 10, 100, 1000});
    ((y * w).sum() + head.sum() * 7.0 + tail.sum() * 5.0).backward();  // one backward, no retain_graph
    CHECK(x.grad().to_vector<double>() == std::vector<double>{1 + 7, 10 + 7, 1 + 100 + 7 + 5, 10 + 1000 + 7 + 5});
  }
  SECTION("gradcheck: strided views of views, a split's piece, ops with operands that require grad") {
    Tensor x = tensor(std::vector<double>{0.3, -0.7, 1.1, 0.5, -1.3, 0.9, 0.2, -0.4, 1.7, -0.6, 0.8, 1.2}, {3, 4})
                   .set_requires_grad(true);
    auto fn = [](const TensorList& in) {
      const Tensor& x = in[0];
      Tensor y = x * 1.0;
      Tensor before = y.t();                                      // taken before every write
      y.select(1, 2).mul_(x.select(1, 0));                        // a strided column
      split(y, 2, 0)[1].add_(x.slice(0, 0, 1), 2.0);              // the split's second piece, row 2
      y.select(0, 0).masked_fill_(gt(x.select(0, 0), 0.4), 0.0);  // no gradient where filled
      // A block of a block, last: div_ saves its result, which a later write into y would make
      // stale (the version counter is y's and its views', as in PyTorch).
      y.slice(0, 1, 3).slice(1, 1, 3).div_(x.slice(0, 0, 2).slice(1, 2, 4) + 3.0);
      return TensorList{y, before * 2.0};
    };
    auto result = gradcheck(fn, {x});
    INFO(result.message);
    CHECK(result.ok);
  }
  SECTION("refused: a view of a leaf that requires grad, a view of a detach() alias") {
    Tensor w = tensor(std::vector<double>{1, 2}).set_requires_grad(true);
    CHECK_THROWS_WITH(w.slice(0, 0, 1).mul_(2.0),
                      Catch::Contains("mul_") && Catch::Contains("of a leaf tensor that requires grad (shape [2])"));
    Tensor y = w * 1.0;
    CHECK_THROWS_WITH(y.detach().slice(0, 0, 1).mul_(w.slice(0, 0, 1)), Catch::Contains("has no base"));
    {
      NoGradGuard no_grad;
      w.slice(0, 0, 1).mul_(2.0);  // under NoGradGuard, as an optimizer updates a parameter
    }
    CHECK(w.to_vector<double>() == std::vector<double>{2, 2});
  }
  SECTION("a saved tensor changed through a view is still caught in backward") {
    Tensor x = tensor(std::vector<double>{1, 2}).set_requires_grad(true);
    Tensor y = x * 1.0;
    Tensor z = y * y;  // saves y
    y.slice(0, 0, 1).mul_(2.0);
    CHECK_THROWS_AS(z.sum().backward(), AutogradError);
  }
}
