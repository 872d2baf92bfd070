// Module bookkeeping on a small nested model with a tied weight and a buffer: dotted names as
// PyTorch forms them, deduplicated parameters, mode propagation, zero_grad, printing, in-place
// dtype moves and load_state_dict's strict errors.
#include <catch2/catch.hpp>
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/module.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

// PyTorch twin:
//   class Block(nn.Module): fc = nn.Linear(d, d); ln = nn.LayerNorm(d)
//   class Net(nn.Module): scale = nn.Parameter(ones(1)); mask buffer; embed = nn.Embedding(10, 4);
//                         blocks = nn.Sequential(Block(4), Block(4)); head = nn.Linear(4, 10)
//                         head.weight = embed.weight
class Block : public UnaryModule {
 public:
  explicit Block(int64_t d) {
    fc = register_module("fc", std::make_shared<Linear>(d, d));
    ln = register_module("ln", std::make_shared<LayerNorm>(d));
  }
  std::string type_name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override { return ln->forward(relu(fc->forward(x))); }
  std::shared_ptr<Linear> fc;
  std::shared_ptr<LayerNorm> ln;
};

class Net : public UnaryModule {
 public:
  Net() {
    embed = register_module("embed", std::make_shared<Embedding>(10, 4));
    blocks = register_module("blocks", std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
                                           std::make_shared<Block>(4), std::make_shared<Block>(4)}));
    head = register_module("head", std::make_shared<Linear>(4, 10));
    head->set_parameter("weight", embed->weight);
    head->weight = embed->weight;
    scale = register_parameter("scale", ones({1}));
    mask = register_buffer("mask", ones({4}));
  }
  std::string type_name() const override { return "Net"; }
  Tensor forward(const Tensor& idx) override {
    return head->forward(blocks->forward(embed->forward(idx) * mask) * scale);
  }
  std::shared_ptr<Embedding> embed;
  std::shared_ptr<Sequential> blocks;
  std::shared_ptr<Linear> head;
  Tensor scale, mask;
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("Module: dotted parameter names as PyTorch forms them, tied weight listed once", "[nn]") {
  auto net = std::make_shared<Net>();
  // PyTorch's order: a module's own parameters first, then its children's, depth first.
  const std::vector<std::string> expected = {
      "scale",          "embed.weight",       "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.0.ln.weight",
      "blocks.0.ln.bias", "blocks.1.fc.weight", "blocks.1.fc.bias",   "blocks.1.ln.weight", "blocks.1.ln.bias",
      "head.bias"};
  CHECK(names_of(net->named_parameters()) == expected);
  CHECK(net->parameters().size() == expected.size());
  CHECK(names_of(net->named_parameters(false)) == std::vector<std::string>{"scale"});
  CHECK(names_of(net->named_buffers()) == std::vector<std::string>{"mask"});
  // 1 + 40 + 2 * (16 + 4 + 4 + 4) + 10: the tied [10, 4] weight counts once.
  CHECK(net->num_parameters() == 1 + 40 + 2 * 28 + 10);

  std::vector<std::string> modules;
  for (const auto& [n, m] : net->named_modules()) modules.push_back(n);
  CHECK(modules == std::vector<std::string>{"", "embed", "blocks", "blocks.0", "blocks.0.fc", "blocks.0.ln",
                                            "blocks.1", "blocks.1.fc", "blocks.1.ln", "head"});
  // One module under two names (a shared block): listed once, under its first name.
  auto shared = std::make_shared<nn::Sequential>();
  auto block = std::make_shared<nn::Linear>(2, 2);
  shared->push_back(block);
  shared->push_back(block);
  std::vector<std::string> twice;
  for (const auto& [n, m] : shared->named_modules()) twice.push_back(n);
  CHECK(twice == std::vector<std::string>{"", "0"});

  // A module no shared_ptr owns (here on the stack) is listed through a pointer that does not
  // own it; an owned one through a pointer that shares its ownership.
  nn::Sequential local;
  local.push_back(block);
  const auto listed = local.named_modules();
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].first.empty());
  CHECK(listed[0].second.get() == &local);
  CHECK(listed[0].second.use_count() == 0);
  CHECK(listed[1].second == block);
  const auto owned = shared->named_modules()[0].second;
  CHECK(owned == shared);
  CHECK_FALSE(owned.owner_before(shared));  // the same owner
  CHECK_FALSE(shared.owner_before(owned));
}

TEST_CASE("Module: state_dict holds tied tensors under both names, and buffers", "[nn]") {
  auto net = std::make_shared<Net>();
  std::map<std::string, Tensor> sd = net->state_dict();
  CHECK(sd.size() == 11 + 1 + 1);  // parameters, the tied alias, the buffer
  REQUIRE(sd.count("head.weight") == 1);
  REQUIRE(sd.count("embed.weight") == 1);
  CHECK(sd.at("head.weight").is_same(sd.at("embed.weight")));
  CHECK(sd.at("head.weight").is_same(net->head->weight));
  CHECK(sd.count("mask") == 1);
  CHECK(sd.count("blocks.1.ln.bias") == 1);
}

TEST_CASE("Module: train and eval reach every descendant", "[nn]") {
  auto net = std::make_shared<Net>();
  for (const auto& [n, m] : net->named_modules()) CHECK(m->is_training());
  net->eval();
  for (const auto& [n, m] : net->named_modules()) CHECK_FALSE(m->is_training());
  net->blocks->train();
  CHECK_FALSE(net->is_training());
  CHECK(net->blocks->operator[](1)->is_training());
  net->train();
  for (const auto& [n, m] : net->named_modules()) CHECK(m->is_training());
}

TEST_CASE("Module: zero_grad sets gradients to none by default, to zeros on request", "[nn]") {
  manual_seed(3);
  auto net = std::make_shared<Net>();
  Tensor idx = tensor<int64_t>({1, 2, 3, 9}, {2, 2});
  net->forward(idx).sum().backward();
  for (const auto& [n, p] : net->named_parameters()) {
    INFO(n);
    CHECK(p.grad().defined());
  }
  net->zero_grad(false);
  for (const auto& [n, p] : net->named_parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().abs().sum().item<float>() == 0.0f);
  }
  net->forward(idx).sum().backward();
  net->zero_grad();
  for (const auto& [n, p] : net->named_parameters()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("Module: the tied weight gets one gradient from both of its uses", "[nn]") {
  manual_seed(4);
  auto net = std::make_shared<Net>();
  Tensor idx = tensor<int64_t>({0, 5}, {1, 2});
  net->forward(idx).sum().backward();
  Tensor g = net->embed->weight.grad();
  REQUIRE(g.defined());
  CHECK(net->head->weight.grad().is_same(g));
  // Rows 1..4 and 6..9 are never looked up, yet the head's use gives them a gradient.
  CHECK(g.select(0, 7).abs().sum().item<float>() > 0.0f);
}

TEST_CASE("Module: printing the tree as PyTorch does", "[nn]") {
  Sequential seq{std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(), std::make_shared<Linear>(3, 2, false)};
  CHECK(seq.str() ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=3, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=3, out_features=2, bias=False)\n"
        ")");
  auto net = std::make_shared<Net>();
  CHECK(net->str() ==
        "Net(\n"
        "  (embed): Embedding(10, 4)\n"
        "  (blocks): Sequential(\n"
        "    (0): Block(\n"
        "      (fc): Linear(in_features=4, out_features=4, bias=True)\n"
        "      (ln): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
        "    )\n"
        "    (1): Block(\n"
        "      (fc): Linear(in_features=4, out_features=4, bias=True)\n"
        "      (ln): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
        "    )\n"
        "  )\n"
        "  (head): Linear(in_features=4, out_features=10, bias=True)\n"
        ")");
}

TEST_CASE("Module: a ModuleList prints a run of children that print alike once, as PyTorch's", "[nn]") {
  ModuleList list;
  for (int i = 0; i < 3; ++i) list.push_back(std::make_shared<Block>(4));
  list.push_back(std::make_shared<ReLU>());
  list.push_back(std::make_shared<Block>(4));  // not next to the run: printed on its own
  list.push_back(std::make_shared<Linear>(2, 2));
  list.push_back(std::make_shared<Linear>(2, 2));
  CHECK(list.str() ==
        "ModuleList(\n"
        "  (0-2): 3 x Block(\n"
        "    (fc): Linear(in_features=4, out_features=4, bias=True)\n"
        "    (ln): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
        "  )\n"
        "  (3): ReLU()\n"
        "  (4): Block(\n"
        "    (fc): Linear(in_features=4, out_features=4, bias=True)\n"
        "    (ln): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
        "  )\n"
        "  (5-6): 2 x Linear(in_features=2, out_features=2, bias=True)\n"
        ")");
  // Sequential prints every child (above), as PyTorch's does; an empty list prints empty.
  CHECK(ModuleList().str() == "ModuleList()");
}

TEST_CASE("Module: a module with both extra_repr and children prints the extra line first", "[nn]") {
  class Wrapper : public Module {
   public:
    Wrapper() { register_module("inner", std::make_shared<ReLU>()); }
    std::string type_name() const override { return "Wrapper"; }
    std::string extra_repr() const override { return "k=2"; }
  };
  Wrapper w;
  CHECK(w.str() == "Wrapper(\n  k=2\n  (inner): ReLU()\n)");
}

TEST_CASE("Module: to(Float64) converts values in place and keeps tensor identity", "[nn]") {
  manual_seed(5);
  auto net = std::make_shared<Net>();
  std::vector<const TensorImpl*> impls;
  std::vector<std::vector<double>> values;
  for (const auto& [n, p] : net->named_parameters()) {
    impls.push_back(p.impl());
    values.push_back(p.to_vector_double());
  }
  const TensorImpl* mask_impl = net->mask.impl();
  net->forward(tensor<int64_t>({1, 2}, {1, 2})).sum().backward();
  net->to(DType::Float64);
  size_t i = 0;
  for (const auto& [n, p] : net->named_parameters()) {
    INFO(n);
    CHECK(p.impl() == impls[i]);
    CHECK(p.dtype() == DType::Float64);
    CHECK(p.requires_grad());
    CHECK_FALSE(p.grad().defined());
    CHECK(p.to_vector_double() == values[i]);  // float32 -> float64 is exact
    ++i;
  }
  CHECK(net->mask.impl() == mask_impl);
  CHECK(net->mask.dtype() == DType::Float64);
  // Still tied, and the model runs in float64.
  CHECK(net->head->weight.is_same(net->embed->weight));
  CHECK(net->forward(tensor<int64_t>({1, 2}, {1, 2})).dtype() == DType::Float64);
  CHECK_THROWS_AS(net->to(DType::Int64), DTypeError);
}

TEST_CASE("Module: load_state_dict copies values and names missing, unexpected and mismatched keys", "[nn]") {
  manual_seed(6);
  auto a = std::make_shared<Net>();
  manual_seed(7);
  auto b = std::make_shared<Net>();
  const TensorImpl* b_fc = b->blocks->at<Block>(0)->fc->weight.impl();
  b->load_state_dict(a->state_dict());
  CHECK(b->blocks->at<Block>(0)->fc->weight.impl() == b_fc);  // copied in place
  for (const auto& [n, t] : a->state_dict()) {
    INFO(n);
    CHECK(b->state_dict().at(n).to_vector_double() == t.to_vector_double());
  }

  std::map<std::string, Tensor> sd = a->state_dict();
  SECTION("missing") {
    sd.erase("blocks.1.fc.bias");
    try {
      b->load_state_dict(sd);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(contains(e.what(), "missing"));
      CHECK(contains(e.what(), "blocks.1.fc.bias"));
    }
    CHECK_NOTHROW(b->load_state_dict(sd, /*strict=*/false));
  }
  SECTION("unexpected") {
    sd["blocks.2.fc.weight"] = zeros({4, 4});
    try {
      b->load_state_dict(sd);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(contains(e.what(), "unexpected"));
      CHECK(contains(e.what(), "blocks.2.fc.weight"));
    }
    CHECK_NOTHROW(b->load_state_dict(sd, /*strict=*/false));
  }
  SECTION("shape mismatch, even when not strict") {
    sd["head.bias"] = zeros({11});
    for (bool strict : {true, false}) {
      try {
        b->load_state_dict(sd, strict);
        FAIL("no error");
      } catch (const Error& e) {
        CHECK(contains(e.what(), "head.bias"));
        CHECK(contains(e.what(), "[11]"));
      }
    }
  }
  SECTION("floating dtypes convert, as PyTorch's copy_ does; integer and floating do not mix") {
    // A bfloat16 (or float64) checkpoint loads into a float32 model, rounded as copy_ rounds.
    std::map<std::string, Tensor> half;
    for (const auto& [n, t] : sd) half[n] = t.is_floating_point() ? t.to(DType::BFloat16) : t;
    half["head.bias"] = sd.at("head.bias").to(DType::Float64);
    b->load_state_dict(half);
    for (const auto& [n, t] : half) {
      INFO(n);
      CHECK(b->state_dict().at(n).dtype() == sd.at(n).dtype());  // the model's dtypes stay
      CHECK(b->state_dict().at(n).to_vector_double() == t.to(sd.at(n).dtype()).to_vector_double());
    }
    sd["mask"] = ones({4}, DType::Int64);
    for (bool strict : {true, false}) {
      try {
        b->load_state_dict(sd, strict);
        FAIL("no error");
      } catch (const Error& e) {
        CHECK(contains(e.what(), "mask"));
        CHECK(contains(e.what(), "int64"));
      }
    }
  }
}

TEST_CASE("Module: registration rejects duplicate and dotted names", "[nn]") {
  class Bare : public Module {
   public:
    std::string type_name() const override { return "Bare"; }
    using Module::register_parameter;
  };
  Bare m;
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_AS(m.register_parameter("w", zeros({2})), Error);
  CHECK_THROWS_AS(m.register_parameter("a.b", zeros({2})), Error);
  CHECK_THROWS_AS(m.register_module("x.y", std::make_shared<ReLU>()), Error);
  CHECK_THROWS_AS(m.register_parameter("u", Tensor()), Error);
  CHECK(m.named_parameters()[0].second.requires_grad());
  // requires_grad false freezes the parameter even when the tensor given requires grad (PyTorch's
  // Parameter(t, requires_grad=False)): the module holds a frozen leaf on the same memory and the
  // caller's tensor keeps its flag.
  Tensor given = ones({3});
  given.set_requires_grad(true);
  const Tensor frozen = m.register_parameter("frozen", given, /*requires_grad=*/false);
  CHECK_FALSE(frozen.requires_grad());
  CHECK(frozen.is_leaf());
  CHECK(frozen.data_ptr() == given.data_ptr());
  CHECK(given.requires_grad());
  CHECK(m.num_parameters(/*trainable_only=*/true) == 2);
  CHECK(m.num_parameters(/*trainable_only=*/false) == 5);
}
