// Pruning (nn/prune.h): each method's mask against what it should prune, worked out from the
// values by hand, PyTorch's "weight_orig" and "weight_mask" keys, iterative pruning choosing only
// among what is left, global pruning over several layers, remove() keeping the parameter's
// identity, training and checkpoints through a pruned model, and the errors that leave the module
// as it was. Also Module::get_parameter and get_buffer, which pruning reads its tensors with.
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/sgd.h"
#include "nn/parametrize.h"
#include "nn/prune.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

std::set<std::string> keys(const Module& m) {
  std::set<std::string> out;
  for (const auto& [k, t] : m.state_dict()) out.insert(k);
  return out;
}

std::vector<float> values(const Tensor& t) { return t.contiguous().to_vector<float>(); }

// A Linear(4, 2) whose weight is w (row-major) and bias zero.
std::shared_ptr<Linear> linear_with(const std::vector<float>& w) {
  auto lin = std::make_shared<Linear>(4, 2);
  NoGradGuard no_grad;
  lin->weight.copy_(tensor(w, {2, 4}));
  lin->bias.zero_();
  return lin;
}

}  // namespace

TEST_CASE("prune amounts: counts, and fractions rounded half to even as Python's round", "[nn][prune]") {
  CHECK(prune::Amount(3).of(8, "t") == 3);
  CHECK(prune::Amount(int64_t{0}).of(0, "t") == 0);
  CHECK(prune::Amount(0.5).of(5, "t") == 2);  // round(2.5) = 2
  CHECK(prune::Amount(0.3).of(5, "t") == 2);  // round(1.5) = 2
  CHECK(prune::Amount(0.7).of(5, "t") == 4);  // round(3.5) = 4
  CHECK(prune::Amount(0.1).of(5, "t") == 0);  // round(0.5) = 0
  CHECK(prune::Amount(1.0).of(7, "t") == 7);
  CHECK_THROWS_WITH(prune::Amount(9).of(8, "prune L1Unstructured"),
                    Catch::Contains("prune L1Unstructured: amount=9 is more than the 8"));
  CHECK_THROWS_WITH(prune::Amount(-1), Catch::Contains("amount=-1 must be a non-negative count"));
  CHECK_THROWS_WITH(prune::Amount(1.5), Catch::Contains("amount=1.5 must be a fraction in [0, 1]"));
  CHECK_THROWS_WITH(prune::Amount(std::nan("")), Catch::Contains("must be a fraction in [0, 1]"));
}

TEST_CASE("l1_unstructured zeroes the smallest magnitudes, with PyTorch's keys, forward and gradient", "[nn][prune]") {
  auto lin = linear_with({0.5f, -3.0f, 0.1f, 2.0f, -0.2f, 1.0f, -4.0f, 0.3f});
  const Tensor orig = lin->weight;
  prune::l1_unstructured(*lin, "weight", lin->weight, 3);
  // |w| smallest three: 0.1, -0.2, 0.3.
  CHECK(values(lin->weight) == std::vector<float>{0.5f, -3.0f, 0, 2.0f, 0, 1.0f, -4.0f, 0});
  CHECK(keys(*lin) == std::set<std::string>{"bias", "weight_mask", "weight_orig"});
  CHECK(lin->get_parameter("weight_orig").impl() == orig.impl());  // the optimizer's tensor stays
  CHECK(values(lin->get_buffer("weight_mask")) == std::vector<float>{1, 1, 0, 1, 0, 1, 1, 0});
  CHECK(lin->num_parameters() == 10);
  CHECK(prune::is_pruned(*lin));
  CHECK(prune::methods(*lin, "weight").size() == 1);
  CHECK(prune::methods(*lin, "weight")[0]->name() == "L1Unstructured");

  // The call multiplies orig by the mask: the pruned entries get no gradient.
  const Tensor x = tensor({1.0f, 2.0f, 3.0f, 4.0f}, {1, 4});
  const Tensor y = (*lin)(x);
  CHECK(values(y) == std::vector<float>{0.5f - 6.0f + 8.0f, 2.0f - 12.0f});
  y.sum().backward();
  CHECK(values(orig.grad()) == std::vector<float>{1, 2, 0, 4, 0, 2, 3, 0});

  // Importance scores choose instead of the values: the three largest weights' scores are lowest.
  auto other = linear_with({0.5f, -3.0f, 0.1f, 2.0f, -0.2f, 1.0f, -4.0f, 0.3f});
  const Tensor scores = tensor({5.0f, 1.0f, 5.0f, 2.0f, 5.0f, 5.0f, 0.5f, 5.0f}, {2, 4});
  prune::l1_unstructured(*other, "weight", other->weight, 3, scores);
  CHECK(values(other->weight) == std::vector<float>{0.5f, 0, 0.1f, 0, -0.2f, 1.0f, 0, 0.3f});
}

TEST_CASE("pruning again chooses among what is left, and remove makes it permanent", "[nn][prune]") {
  auto lin = linear_with({8, -7, 6, -5, 4, -3, 2, -1});
  const Tensor orig = lin->weight;
  prune::l1_unstructured(*lin, "weight", lin->weight, 0.5);  // 4 of 8: |1|, |2|, |3|, |4|
  CHECK(values(lin->weight) == std::vector<float>{8, -7, 6, -5, 0, 0, 0, 0});
  // Half of the 4 left (not of 8, and never an entry already pruned): |5| and |6|.
  prune::l1_unstructured(*lin, "weight", lin->weight, 0.5);
  CHECK(values(lin->weight) == std::vector<float>{8, -7, 0, 0, 0, 0, 0, 0});
  CHECK(prune::methods(*lin, "weight").size() == 2);
  // A mask given by hand adds its zeros to the others.
  prune::custom_from_mask(*lin, "weight", lin->weight,
                          tensor({0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, {2, 4}));
  CHECK(values(lin->weight) == std::vector<float>{0, -7, 0, 0, 0, 0, 0, 0});
  CHECK(values(lin->get_buffer("weight_mask")) == std::vector<float>{0, 1, 0, 0, 0, 0, 0, 0});

  prune::remove(*lin, "weight");
  CHECK(keys(*lin) == std::set<std::string>{"bias", "weight"});
  CHECK(lin->get_parameter("weight").impl() == orig.impl());
  CHECK(lin->weight.impl() == orig.impl());
  CHECK(values(orig) == std::vector<float>{0, -7, 0, 0, 0, 0, 0, 0});
  CHECK_FALSE(prune::is_pruned(*lin));
  CHECK(lin->forward_pre_hooks().empty());
  CHECK_THROWS_WITH(prune::remove(*lin, "weight"), Catch::Contains("Linear's \"weight\" is not pruned"));
  // Pruned again after remove: a fresh start over all entries, where the first of the tied zeros
  // goes (as kiln's topk breaks ties).
  prune::l1_unstructured(*lin, "weight", lin->weight, 1);
  CHECK(values(lin->get_buffer("weight_mask")) == std::vector<float>{0, 1, 1, 1, 1, 1, 1, 1});
}

TEST_CASE("ln_structured and random_structured prune whole channels", "[nn][prune]") {
  Conv2d conv(2, 4, {1, 2}, {1, 1}, {0, 0}, {1, 1}, 1, false);
  {
    NoGradGuard no_grad;
    // Output channel c holds c + 1 in its first entry and (c % 2) 10 in its last: L2 norms
    // 1, 10.2, 3, 10.8; L-inf 1, 10, 3, 10; L1 1, 12, 3, 14.
    conv.weight.zero_();
    for (int64_t c = 0; c < 4; ++c) {
      conv.weight.select(0, c).select(0, 0).select(0, 0).select(0, 0).fill_(static_cast<double>(c + 1));
      conv.weight.select(0, c).select(0, 1).select(0, 0).select(0, 1).fill_(c % 2 ? 10.0 : 0.0);
    }
  }
  auto zero_channels = [&](const Tensor& mask) {
    std::vector<int64_t> out;
    for (int64_t c = 0; c < 4; ++c)
      if (amax(mask.select(0, c), {}).item<double>() == 0.0) out.push_back(c);
    return out;
  };
  prune::ln_structured(conv, "weight", conv.weight, 2, 2.0, 0);
  CHECK(zero_channels(conv.get_buffer("weight_mask")) == std::vector<int64_t>{0, 2});
  // Once more, one of the two channels left: the smaller L1 norm, 12 against 14.
  prune::ln_structured(conv, "weight", conv.weight, 1, 1.0, 0);
  CHECK(zero_channels(conv.get_buffer("weight_mask")) == std::vector<int64_t>{0, 1, 2});
  CHECK(amax(abs(conv.weight.select(0, 3) - conv.get_parameter("weight_orig").select(0, 3)), {}).item<double>() == 0.0);

  // The norms: +inf is the largest magnitude, -inf the smallest, 0 counts nonzeros.
  // Rows [1, 1, 1, 1] and [0, 0, 0, 5]: L-inf 1 and 5, L-(-inf) 1 and 0, L0 4 and 1, L0.5 16 and 5.
  auto lin = linear_with({1, 1, 1, 1, 0, 0, 0, 5});
  auto pruned_row = [&](double n) {
    auto l = linear_with({1, 1, 1, 1, 0, 0, 0, 5});
    prune::ln_structured(*l, "weight", l->weight, 1, n, 0);
    return amax(l->get_buffer("weight_mask").select(0, 0), {}).item<double>() == 0.0 ? 0 : 1;
  };
  CHECK(pruned_row(std::numeric_limits<double>::infinity()) == 0);
  CHECK(pruned_row(0.0) == 1);
  CHECK(pruned_row(-std::numeric_limits<double>::infinity()) == 1);
  CHECK(pruned_row(0.5) == 1);
  // Along the columns (dim -1), 75% of 4: the three of norm 1 go, the last (norm 5.1) stays.
  prune::ln_structured(*lin, "weight", lin->weight, 0.75, 2.0, -1);
  CHECK(values(lin->weight) == std::vector<float>{0, 0, 0, 1, 0, 0, 0, 5});

  Conv2d rc(3, 8, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false);
  prune::random_structured(rc, "weight", rc.weight, 3, 0, Generator(4));
  const Tensor mask = rc.get_buffer("weight_mask");
  CHECK(sum(mask).item<double>() == 5 * 3);  // 5 whole output channels of 3 entries stay
  Conv2d same(3, 8, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false);
  prune::random_structured(same, "weight", same.weight, 3, 0, Generator(4));
  CHECK(values(same.get_buffer("weight_mask")) == values(mask));

  CHECK_THROWS_WITH(prune::ln_structured(conv, "bias", conv.weight, 1, 2.0, 0),
                    Catch::Contains("Conv2d has no parameter \"bias\""));
  auto with_bias = linear_with({1, 2, 3, 4, 5, 6, 7, 8});
  CHECK_THROWS_WITH(
      prune::ln_structured(*with_bias, "bias", with_bias->bias, 1, 2.0, 0),
      Catch::Contains("prune LnStructured: structured pruning needs a tensor of 2 dims or more, got [2]"));
  CHECK_THROWS_WITH(prune::random_structured(*with_bias, "weight", with_bias->weight, 1, 2),
                    Catch::Contains("prune RandomStructured: dim 2 is out of range for [2, 4]"));
  CHECK_FALSE(prune::is_pruned(*with_bias));  // the failed calls changed nothing
  CHECK(keys(*with_bias) == std::set<std::string>{"bias", "weight"});
}

TEST_CASE("a structured method after an unstructured one scores the tensor as the module uses it", "[nn][prune]") {
  // Rows [10, 1, 1, 1] and [3, 3, 3, 3]; once the 10 is masked, row 0's L2 norm is sqrt(3), below
  // row 1's 6 (weight_orig still holds the 10, which must not count).
  auto lin = linear_with({10, 1, 1, 1, 3, 3, 3, 3});
  prune::custom_from_mask(*lin, "weight", lin->weight,
                          tensor({0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, {2, 4}));
  prune::ln_structured(*lin, "weight", lin->weight, 1, 2.0, 0);
  CHECK(values(lin->weight) == std::vector<float>{0, 0, 0, 0, 3, 3, 3, 3});
  // A frozen parameter stays frozen through pruning and remove.
  auto frozen = linear_with({1, 2, 3, 4, 5, 6, 7, 8});
  frozen->weight.set_requires_grad(false);
  prune::l1_unstructured(*frozen, "weight", frozen->weight, 2);
  CHECK_FALSE(frozen->get_parameter("weight_orig").requires_grad());
  CHECK(frozen->num_parameters(true) == 2);
  prune::remove(*frozen, "weight");
  CHECK_FALSE(frozen->weight.requires_grad());
  CHECK(values(frozen->weight) == std::vector<float>{0, 0, 3, 4, 5, 6, 7, 8});
  // Any integer type counts.
  prune::l1_unstructured(*frozen, "weight", frozen->weight, size_t{1});
  CHECK(sum(frozen->get_buffer("weight_mask")).item<double>() == 7);
}

TEST_CASE("random_unstructured prunes exactly its amount, the same for the same seed", "[nn][prune]") {
  Linear a(10, 10), b(10, 10);
  prune::random_unstructured(a, "weight", a.weight, 0.3, Generator(11));
  prune::random_unstructured(b, "weight", b.weight, 0.3, Generator(11));
  CHECK(sum(a.get_buffer("weight_mask")).item<double>() == 70);
  CHECK(values(a.get_buffer("weight_mask")) == values(b.get_buffer("weight_mask")));
  // Another 50% of the 70 left: 35 more.
  prune::random_unstructured(a, "weight", a.weight, 0.5, Generator(12));
  CHECK(sum(a.get_buffer("weight_mask")).item<double>() == 35);
  prune::identity(b, "weight", b.weight);  // prunes nothing more
  CHECK(sum(b.get_buffer("weight_mask")).item<double>() == 70);
}

TEST_CASE("global_unstructured prunes the smallest magnitudes over several layers", "[nn][prune]") {
  auto small = linear_with({0.1f, -0.2f, 0.3f, -0.4f, 0.5f, 0.6f, -0.7f, 0.8f});
  auto large = linear_with({1, -2, 3, -4, 5, 6, -7, 0.05f});
  prune::l1_unstructured(*large, "weight", large->weight, 1);  // 0.05 already gone
  // 6 of the 15 still unpruned: the six smallest of small's, none of large's.
  prune::global_unstructured({{small.get(), "weight", &small->weight}, {large.get(), "weight", &large->weight}},
                             std::make_shared<prune::L1Unstructured>(6));
  CHECK(values(small->weight) == std::vector<float>{0, 0, 0, 0, 0, 0, -0.7f, 0.8f});
  CHECK(values(large->weight) == std::vector<float>{1, -2, 3, -4, 5, 6, -7, 0});
  CHECK(prune::methods(*small, "weight").back()->name() == "CustomFromMask");
  // Importance scores per target choose instead of the values.
  auto c = linear_with({1, 1, 1, 1, 1, 1, 1, 1}), d = linear_with({1, 1, 1, 1, 1, 1, 1, 1});
  prune::global_unstructured({{c.get(), "weight", &c->weight, full({2, 4}, 9.0)}, {d.get(), "weight", &d->weight}},
                             std::make_shared<prune::L1Unstructured>(0.5));
  CHECK(sum(c->get_buffer("weight_mask")).item<double>() == 8);
  CHECK(sum(d->get_buffer("weight_mask")).item<double>() == 0);
  CHECK_THROWS_WITH(
      prune::global_unstructured({{c.get(), "weight", &c->weight}}, std::make_shared<prune::LnStructured>(1, 2.0, 0)),
      Catch::Contains("only unstructured methods prune globally, got LnStructured"));
  // A bad target anywhere is found before any target changes.
  auto e = linear_with({1, 2, 3, 4, 5, 6, 7, 8}), f = linear_with({1, 2, 3, 4, 5, 6, 7, 8});
  Tensor not_the_member = f->weight.detach().clone();
  CHECK_THROWS_WITH(prune::global_unstructured({{e.get(), "weight", &e->weight}, {f.get(), "weight", &not_the_member}},
                                               std::make_shared<prune::L1Unstructured>(2)),
                    Catch::Contains("the member given for Linear's \"weight\" is not the tensor registered"));
  CHECK_THROWS_WITH(prune::global_unstructured({{e.get(), "weight", &e->weight}, {e.get(), "weight", &e->weight}},
                                               std::make_shared<prune::L1Unstructured>(2)),
                    Catch::Contains("Linear's \"weight\" is a target twice"));
  CHECK_FALSE(prune::is_pruned(*e));
  CHECK(keys(*e) == std::set<std::string>{"bias", "weight"});
}

TEST_CASE("a pruned model trains, moves and reloads with its masks", "[nn][prune]") {
  manual_seed(5);
  Sequential net;
  net.push_back(std::make_shared<Linear>(6, 5));
  net.push_back(std::make_shared<ReLU>());
  net.push_back(std::make_shared<Linear>(5, 3));
  auto& first = dynamic_cast<Linear&>(*net.named_children()[0].second);
  prune::l1_unstructured(first, "weight", first.weight, 0.4);
  CHECK(prune::is_pruned(net));
  CHECK(keys(net).count("0.weight_orig") == 1);
  CHECK(keys(net).count("0.weight_mask") == 1);
  const Tensor mask = first.get_buffer("weight_mask");
  optim::SGD sgd(net.parameters(), 0.1, 0.9, 0.0, 0.01);
  const Tensor x = randn({8, 6});
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    const Tensor y = net(x);
    (y * y).mean().backward();
    sgd.step();
  }
  // The pruned entries get no gradient; weight decay still moves them in weight_orig, yet the
  // weight the layer uses (set by its hook when called) stays zero there.
  CHECK(amax(abs(first.get_parameter("weight_orig").grad() * (1.0 - mask)), {}).item<double>() == 0.0);
  CHECK(amax(abs(first.get_parameter("weight_orig").grad() * mask), {}).item<double>() > 0.0);
  CHECK(sum(ne(first.get_parameter("weight_orig") * (1.0 - mask), 0.0)).item<int64_t>() > 0);
  net(x);
  CHECK(amax(abs(first.weight * (1.0 - mask)), {}).item<double>() == 0.0);
  CHECK(amax(abs(first.weight - first.get_parameter("weight_orig") * mask), {}).item<double>() == 0.0);

  // Pruning again between a forward and its backward: the mask is a new buffer, so the one the
  // forward saved is unchanged and backward runs.
  const Tensor before = net(x).sum();
  prune::l1_unstructured(first, "weight", first.weight, 1);
  CHECK_NOTHROW(before.backward());
  CHECK(first.get_buffer("weight_mask").impl() != mask.impl());
  CHECK(sum(mask).item<double>() - sum(first.get_buffer("weight_mask")).item<double>() == 1.0);

  // A pruned checkpoint loads into a model pruned with identity (PyTorch's recipe).
  manual_seed(6);
  Sequential copy;
  copy.push_back(std::make_shared<Linear>(6, 5));
  copy.push_back(std::make_shared<ReLU>());
  copy.push_back(std::make_shared<Linear>(5, 3));
  auto& copy_first = dynamic_cast<Linear&>(*copy.named_children()[0].second);
  prune::identity(copy_first, "weight", copy_first.weight);
  copy.load_state_dict(net.state_dict());
  CHECK(values(copy(x)) == values(net(x)));

  // to(dtype) converts orig and mask; the next call computes the weight in the new dtype.
  net.to(DType::Float64);
  CHECK(net(x.to(DType::Float64)).dtype() == DType::Float64);
  CHECK(first.weight.dtype() == DType::Float64);
}

TEST_CASE("pruning errors name the module and tensor and change nothing", "[nn][prune]") {
  auto lin = linear_with({1, 2, 3, 4, 5, 6, 7, 8});
  Tensor copy = lin->weight.detach().clone();
  CHECK_THROWS_WITH(prune::l1_unstructured(*lin, "kernel", lin->weight, 1),
                    Catch::Contains("prune L1Unstructured: Linear has no parameter \"kernel\""));
  CHECK_THROWS_WITH(prune::l1_unstructured(*lin, "weight", copy, 1),
                    Catch::Contains("the member given for Linear's \"weight\" is not the tensor registered"));
  CHECK_THROWS_WITH(prune::l1_unstructured(*lin, "weight", lin->weight, 9),
                    Catch::Contains("amount=9 is more than the 8"));
  CHECK_THROWS_WITH(prune::l1_unstructured(*lin, "weight", lin->weight, 1, zeros({4, 2})),
                    Catch::Contains("the importance scores of Linear's \"weight\" are [4, 2]"));
  CHECK_THROWS_WITH(prune::custom_from_mask(*lin, "weight", lin->weight, ones({8})),
                    Catch::Contains("prune CustomFromMask: the mask is [8], the tensor is [2, 4]"));
  CHECK_THROWS_WITH(prune::apply(*lin, "weight", lin->weight, nullptr), Catch::Contains("method"));
  CHECK_THROWS_WITH(prune::LnStructured(1, std::nan(""), 0),
                    Catch::Contains("prune LnStructured: the norm's order n is NaN"));
  CHECK_FALSE(prune::is_pruned(*lin));
  CHECK(keys(*lin) == std::set<std::string>{"bias", "weight"});
  // Once pruned, another member for the same name is refused.
  prune::l1_unstructured(*lin, "weight", lin->weight, 1);
  CHECK_THROWS_WITH(prune::l1_unstructured(*lin, "weight", copy, 1),
                    Catch::Contains("already pruned into another member"));
  CHECK(sum(lin->get_buffer("weight_mask")).item<double>() == 7);
  // A parametrized tensor is not a parameter of the module any more.
  auto wn = linear_with({1, 2, 3, 4, 5, 6, 7, 8});
  weight_norm(*wn);
  CHECK_THROWS_WITH(prune::l1_unstructured(*wn, "weight", wn->weight, 1),
                    Catch::Contains("it is parametrized, and a parametrized tensor cannot be pruned"));
  // Nor an original of its parametrization: the list reads it directly, so a mask would not apply.
  auto list = parametrization_list(*wn, "weight");
  Tensor original = list->get_parameter("original1");
  CHECK_THROWS_WITH(prune::l1_unstructured(*list, "original1", original, 1),
                    Catch::Contains("is an original of a parametrization, which reads it directly"));
  CHECK_FALSE(prune::is_pruned(*wn));
}

TEST_CASE("Module::get_parameter and get_buffer follow dotted paths", "[nn]") {
  Sequential net;
  net.push_back(std::make_shared<Linear>(3, 2));
  net.push_back(std::make_shared<BatchNorm1d>(2));
  const auto& lin = dynamic_cast<Linear&>(*net.named_children()[0].second);
  CHECK(net.get_parameter("0.weight").impl() == lin.weight.impl());
  CHECK(net.get_buffer("1.running_mean").sizes() == Shape{2});
  CHECK(lin.get_parameter("bias").impl() == lin.bias.impl());
  CHECK_THROWS_WITH(net.get_parameter("2.weight"),
                    Catch::Contains("Sequential has no child \"2\" (looking up \"2.weight\" in Sequential)"));
  CHECK_THROWS_WITH(net.get_parameter("1.running_mean"),
                    Catch::Contains("BatchNorm1d has no parameter \"running_mean\" (looking up \"1.running_mean\""));
  CHECK_THROWS_WITH(lin.get_buffer("weight"), Catch::Contains("Linear has no buffer \"weight\""));
}
