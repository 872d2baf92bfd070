// Whole models on tiny configs: GPT's nanoGPT names, parameter count, tying, loss at init, that a
// few SGD steps learn a repeated sequence, and generate; ResNet and SmallCNN shapes for 28x28x1 and
// 32x32x3 inputs, and a backward pass that reaches every parameter.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/resnet.h"
#include "nn/transformer.h"
#include "tests/bitwise.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::nn;

namespace {

GPTConfig tiny_gpt(int64_t n_layer = 2) {
  GPTConfig c;
  c.vocab_size = 48;
  c.block_size = 16;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

// Plain SGD, by hand (the optimizers are tested elsewhere).
void sgd_step(Module& m, double lr) {
  NoGradGuard no_grad;
  for (Tensor p : m.parameters())
    if (p.grad().defined()) p.sub_(p.grad(), lr);
  m.zero_grad();
}

void check_every_parameter_gets_a_gradient(Module& m) {
  for (const auto& [n, p] : m.named_parameters()) {
    INFO(n);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().abs().sum().item<float>() > 0.0f);
  }
}

double sample_std(const Tensor& t) {
  std::vector<double> v = t.to_vector_double();
  double m = 0, ss = 0;
  for (double e : v) m += e;
  m /= static_cast<double>(v.size());
  for (double e : v) ss += (e - m) * (e - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

}  // namespace

TEST_CASE("GPT: parameter names are nanoGPT's", "[nn]") {
  auto gpt = std::make_shared<GPT>(tiny_gpt(2));
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "transformer.h." + std::to_string(i) + ".";
    for (const char* s : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expected.push_back(b + s);
  }
  expected.push_back("transformer.ln_f.weight");
  expected.push_back("transformer.ln_f.bias");
  std::vector<std::string> names;
  for (const auto& [n, p] : gpt->named_parameters()) names.push_back(n);
  CHECK(names == expected);

  // The state dict also carries the tied head under its own name (as PyTorch's does).
  auto sd = gpt->state_dict();
  CHECK(sd.size() == expected.size() + 1);
  REQUIRE(sd.count("lm_head.weight") == 1);
  CHECK(sd.at("lm_head.weight").is_same(sd.at("transformer.wte.weight")));
  CHECK(gpt->lm_head->weight.is_same(gpt->wte->weight));

  // Without biases, as nanoGPT's bias=False.
  GPTConfig nb = tiny_gpt(1);
  nb.bias = false;
  auto no_bias = std::make_shared<GPT>(nb);
  for (const auto& [n, p] : no_bias->named_parameters()) CHECK(n.find("bias") == std::string::npos);
}

TEST_CASE("GPT: parameter count equals the formula, init as nanoGPT", "[nn]") {
  GPTConfig c = tiny_gpt(3);
  auto gpt = std::make_shared<GPT>(c);
  const int64_t C = c.n_embd, V = c.vocab_size, L = c.n_layer;
  // wte + wpe + per block (ln 2x2C, attn 4C^2 + 4C, mlp 8C^2 + 5C) + ln_f; lm_head is tied.
  const int64_t expected = V * C + c.block_size * C + L * (12 * C * C + 13 * C) + 2 * C;
  CHECK(gpt->num_parameters() == expected);
  CHECK(gpt->get_num_params() == expected - c.block_size * C);
  CHECK(gpt->get_num_params(false) == expected);

  // Bigger widths so the sample std is meaningful.
  GPTConfig w = c;
  w.n_embd = 64;
  w.vocab_size = 256;
  auto wide = std::make_shared<GPT>(w);
  for (const auto& [n, p] : wide->named_parameters()) {
    INFO(n);
    if (n.find("c_proj.weight") != std::string::npos) {
      CHECK(sample_std(p) == Approx(0.02 / std::sqrt(2.0 * 3)).epsilon(0.1));
    } else if (n.find("ln") != std::string::npos) {
      CHECK(sample_std(p) == 0.0);  // LayerNorm: ones and zeros
    } else if (n.find("weight") != std::string::npos) {
      CHECK(sample_std(p) == Approx(0.02).epsilon(0.1));
    } else {
      CHECK(p.abs().sum().item<float>() == 0.0f);  // Linear biases start at zero
    }
  }
}

TEST_CASE("GPT: the gpt2_124m preset has GPT-2 small's 124,439,808 parameters", "[nn]") {
  const GPTConfig c = GPTConfig::gpt2_124m();
  CHECK(c.vocab_size == 50257);
  CHECK(c.block_size == 1024);
  CHECK(c.n_layer == 12);
  CHECK(c.n_head == 12);
  CHECK(c.n_embd == 768);
  CHECK(c.dropout == 0.0);
  CHECK(c.bias);
  // Built for real (about 500 MB of float32): the count comes from the module tree, not the formula,
  // so a missing or untied layer shows. 124,439,808 is the number Hugging Face's GPT-2 checkpoint
  // holds; nanoGPT prints 123.65M, the count without the position embedding.
  auto gpt = std::make_shared<GPT>(c);
  CHECK(gpt->get_num_params(false) == 124439808);
  CHECK(gpt->get_num_params() == 123653376);
  CHECK(gpt->lm_head->weight.is_same(gpt->wte->weight));
}

TEST_CASE("GPT: logits shape, length check, loss at init near ln(vocab)", "[nn]") {
  manual_seed(1);
  GPTConfig c = tiny_gpt(2);
  auto gpt = std::make_shared<GPT>(c);
  Tensor idx = randint(0, c.vocab_size, {3, 10});
  CHECK(gpt->forward(idx).sizes() == Shape{3, 10, c.vocab_size});
  CHECK_THROWS_AS(gpt->forward(randint(0, c.vocab_size, {1, c.block_size + 1})), Error);
  CHECK(gpt->forward(randint(0, c.vocab_size, {1, c.block_size})).sizes() == Shape{1, c.block_size, c.vocab_size});

  Tensor targets = randint(0, c.vocab_size, {3, 10});
  const double loss = gpt->loss(idx, targets).item<float>();
  CHECK(loss == Approx(std::log(static_cast<double>(c.vocab_size))).margin(0.1));
  CHECK(gpt->str().find("(transformer): ModuleDict(") != std::string::npos);
  CHECK(gpt->str().find("(lm_head): Linear(in_features=16, out_features=48, bias=False)") != std::string::npos);
}

TEST_CASE("GPT: a few SGD steps on a repeated sequence drive the loss down", "[nn]") {
  manual_seed(2);
  GPTConfig c = tiny_gpt(1);
  c.vocab_size = 8;
  c.block_size = 8;
  auto gpt = std::make_shared<GPT>(c);
  // 0 1 2 3 4 5 6 7 0 1 2 ...: each next token is determined by the current one.
  std::vector<int64_t> seq;
  for (int i = 0; i < 9; ++i) seq.push_back(i % 8);
  Tensor all = tensor<int64_t>(seq);
  Tensor idx = all.slice(0, 0, 8).unsqueeze(0).contiguous();
  Tensor targets = all.slice(0, 1, 9).unsqueeze(0).contiguous();
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    Tensor loss = gpt->loss(idx, targets);
    if (step == 0) first = loss.item<float>();
    last = loss.item<float>();
    loss.backward();
    sgd_step(*gpt, 0.5);
  }
  INFO("first " << first << " last " << last);
  CHECK(last < 0.5 * first);
}

TEST_CASE("GPT: the backward pass reaches every parameter, the tied one from both uses", "[nn]") {
  manual_seed(3);
  GPTConfig c = tiny_gpt(2);
  c.dropout = 0.1;
  auto gpt = std::make_shared<GPT>(c);
  const Tensor x = randint(0, c.vocab_size, {2, 6}), y = randint(0, c.vocab_size, {2, 6});
  manual_seed(10);  // the same dropout masks in both runs below
  gpt->loss(x, y).backward();
  check_every_parameter_gets_a_gradient(*gpt);
  const Tensor tied = gpt->wte->weight.grad().clone();
  // The same step with the output projection untied (its own copy of the weight): the tied
  // gradient must be the embedding's part plus the projection's, each non-zero.
  gpt->zero_grad();
  const Tensor head = gpt->wte->weight.detach().clone().set_requires_grad(true);
  gpt->lm_head->weight = head;
  manual_seed(10);
  gpt->loss(x, y).backward();
  const Tensor from_embedding = gpt->wte->weight.grad(), from_head = head.grad();
  CHECK(from_embedding.abs().sum().item<float>() > 0.0f);
  CHECK(from_head.abs().sum().item<float>() > 0.0f);
  CHECK(test::worst_ratio(tied, from_embedding + from_head, 1e-6, 1e-5) <= 1.0);
}

TEST_CASE("GPT: generate appends in-range tokens, crops to block_size, honours top_k", "[nn]") {
  manual_seed(4);
  GPTConfig c = tiny_gpt(1);
  auto gpt = std::make_shared<GPT>(c);
  gpt->eval();
  Tensor idx = randint(0, c.vocab_size, {2, 5});
  Tensor out = gpt->generate(idx, 4);
  CHECK(out.sizes() == Shape{2, 9});
  CHECK(out.dtype() == DType::Int64);
  CHECK(out.slice(1, 0, 5).to_vector<int64_t>() == idx.to_vector<int64_t>());
  for (int64_t t : out.to_vector<int64_t>()) {
    CHECK(t >= 0);
    CHECK(t < c.vocab_size);
  }
  CHECK_FALSE(out.requires_grad());

  // Longer than block_size: the context is cropped, generation goes on.
  Tensor long_out = gpt->generate(randint(0, c.vocab_size, {1, c.block_size}), 3, 0.8, 5);
  CHECK(long_out.sizes() == Shape{1, c.block_size + 3});

  // top_k = 1 is greedy: the argmax of the last logits.
  Tensor greedy = gpt->generate(idx, 1, 1.0, 1);
  Tensor expect = argmax(gpt->forward(idx).select(1, 4), -1);
  CHECK(greedy.select(1, 5).to_vector<int64_t>() == expect.to_vector<int64_t>());
  // A temperature so small that the logits divided by it overflow float32 is greedy too, not NaN.
  Tensor cold = gpt->generate(idx, 1, 1e-45);
  CHECK(cold.select(1, 5).to_vector<int64_t>() == expect.to_vector<int64_t>());

  // A nucleus smaller than any probability keeps the likeliest token alone: greedy again.
  Tensor nucleus = gpt->generate(idx, 1, 1.0, std::nullopt, 1e-9);
  CHECK(nucleus.select(1, 5).to_vector<int64_t>() == expect.to_vector<int64_t>());
  CHECK(gpt->generate(idx, 3, 0.9, 20, 0.9).sizes() == Shape{2, 8});

  CHECK_THROWS_AS(gpt->generate(idx, 1, 0.0), Error);
  CHECK_THROWS_AS(gpt->generate(idx, 1, 1.0, 0), Error);
  CHECK_THROWS_WITH(gpt->generate(idx, 1, 1.0, std::nullopt, 0.0),
                    Catch::Contains("GPT::generate") && Catch::Contains("top_p"));
  CHECK_THROWS_WITH(gpt->generate(idx, 1, 1.0, std::nullopt, 1.5), Catch::Contains("top_p") && Catch::Contains("1.5"));
}

TEST_CASE("filter_top_p keeps each row's likeliest tokens until they hold top_p, ties included", "[nn]") {
  // Probabilities 0.5, 0.2, 0.2, 0.1 in two orders; the mass before each token, likeliest first, is
  // 0, 0.5, 0.7, 0.9.
  const double ninf = -std::numeric_limits<double>::infinity();
  const Tensor logits = log(tensor({0.5, 0.2, 0.2, 0.1, 0.1, 0.2, 0.5, 0.2}, {2, 4}));
  auto kept = [&](double top_p) {
    std::vector<int> k;
    for (double v : filter_top_p(logits, top_p).to_vector_double()) k.push_back(v == ninf ? 0 : 1);
    return k;
  };
  CHECK(kept(0.45) == std::vector<int>{1, 0, 0, 0, 0, 0, 1, 0});  // the likeliest alone
  // 0.5 is not yet 0.55: the next token joins, and its tie with it.
  CHECK(kept(0.55) == std::vector<int>{1, 1, 1, 0, 0, 1, 1, 1});
  CHECK(kept(0.95) == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(kept(1.0) == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1});
  // Kept logits are the input's own values.
  const Tensor f = filter_top_p(logits, 0.55);
  CHECK(f.select(0, 0).select(0, 0).item<double>() == logits.select(0, 0).select(0, 0).item<double>());
  CHECK_THROWS_WITH(filter_top_p(logits, 0.0), Catch::Contains("filter_top_p") && Catch::Contains("(0, 1]"));
  CHECK_THROWS_WITH(filter_top_p(tensor({int64_t{1}, int64_t{2}}, {2}), 0.5),
                    Catch::Contains("filter_top_p") && Catch::Contains("int64"));
}

TEST_CASE("ResNet: shapes for 28x28x1 and 32x32x3, torchvision names, backward reaches everything", "[nn]") {
  manual_seed(5);
  SECTION("Fashion-MNIST") {
    ResNetConfig cfg;
    cfg.in_channels = 1;
    auto net = std::make_shared<ResNet>(cfg);
    Tensor y = net->forward(randn({2, 1, 28, 28}));
    CHECK(y.sizes() == Shape{2, 10});
    cross_entropy(y, tensor<int64_t>({3, 7})).backward();
    check_every_parameter_gets_a_gradient(*net);
    auto sd = net->state_dict();
    CHECK(sd.count("layer2.0.downsample.0.weight") == 1);
    CHECK(sd.count("layer2.0.downsample.1.running_var") == 1);
    CHECK(sd.count("layer1.0.downsample.0.weight") == 0);  // same width and stride: identity
    CHECK(sd.count("layer3.1.conv2.weight") == 1);
    CHECK(sd.count("fc.weight") == 1);
    // He init, fan_out: std sqrt(2 / (64 * 9)) on a [64, 64, 3, 3] conv.
    CHECK(sample_std(net->layers[2]->at<BasicBlock>(1)->conv2->weight) == Approx(std::sqrt(2.0 / 576.0)).epsilon(0.05));
    net->eval();
    CHECK(net->forward(randn({1, 1, 28, 28})).sizes() == Shape{1, 10});
    CHECK_THROWS_AS(net->forward(randn({1, 3, 28, 28})), ShapeError);
  }
  SECTION("CIFAR, custom depth") {
    ResNetConfig cfg;
    cfg.blocks = {1, 1, 1};
    cfg.num_classes = 5;
    auto net = std::make_shared<ResNet>(cfg);
    Tensor y = net->forward(randn({2, 3, 32, 32}));
    CHECK(y.sizes() == Shape{2, 5});
    y.sum().backward();
    check_every_parameter_gets_a_gradient(*net);
    CHECK(net->layers[0]->size() == 1);
  }
  SECTION("ResNet-18 for CIFAR: four stages") {
    auto net = std::make_shared<ResNet>(ResNetConfig::resnet18_cifar());
    // The CIFAR ResNet-18's count: 11,173,962 parameters for 10 classes.
    CHECK(net->num_parameters() == 11173962);
    CHECK(net->layers.size() == 4);
    auto sd = net->state_dict();
    CHECK(sd.count("layer4.1.bn2.running_var") == 1);
    CHECK(sd.count("layer4.0.downsample.0.weight") == 1);
    CHECK(sd.at("fc.weight").sizes() == Shape{10, 512});
    Tensor y = net->forward(randn({2, 3, 32, 32}));
    CHECK(y.sizes() == Shape{2, 10});
  }
}

TEST_CASE("ResNet: a BasicBlock's fused batch norms give the bits of its modules one after another", "[nn]") {
  using kiln::test::bitwise_equal;
  manual_seed(8);
  for (const int64_t stride : {1, 2}) {
    const int64_t out_channels = stride == 1 ? 4 : 8;  // stride 2: a downsampling shortcut
    INFO("stride " << stride);
    BasicBlock block(4, out_channels, stride);
    const Tensor x = randn({2, 4, 6, 6}).set_requires_grad(true);
    const Tensor y = block.forward(x);
    // The block as the ops one after another, through BatchNorm2d::forward without an epilogue.
    const Tensor shortcut = block.downsample ? block.downsample->forward(x) : x;
    const Tensor h = relu(block.bn1->forward(block.conv1->forward(x)));
    const Tensor y_ops = relu(block.bn2->forward(block.conv2->forward(h)) + shortcut);
    CHECK(bitwise_equal(y, y_ops));
    TensorList inputs{x};
    for (const auto& [name, p] : block.named_parameters()) inputs.push_back(p);
    const Tensor dy = randn(y.sizes());
    const TensorList g = grad({y}, inputs, {dy}), g_ops = grad({y_ops}, inputs, {dy});
    for (size_t i = 0; i < inputs.size(); ++i) CHECK(bitwise_equal(g[i], g_ops[i]));
  }
}

TEST_CASE("SmallCNN: shapes for 28x28x1 and 32x32x3, backward reaches everything", "[nn]") {
  manual_seed(6);
  auto mnist = std::make_shared<SmallCNN>();
  CHECK(mnist->classifier->at<Linear>(1)->in_features == 64 * 7 * 7);
  Tensor y = mnist->forward(randn({2, 1, 28, 28}));
  CHECK(y.sizes() == Shape{2, 10});
  cross_entropy(y, tensor<int64_t>({1, 9})).backward();
  check_every_parameter_gets_a_gradient(*mnist);

  SmallCNNConfig cfg;
  cfg.in_channels = 3;
  cfg.image_size = 32;
  auto cifar = std::make_shared<SmallCNN>(cfg);
  Tensor z = cifar->forward(randn({2, 3, 32, 32}));
  CHECK(z.sizes() == Shape{2, 10});
  z.sum().backward();
  check_every_parameter_gets_a_gradient(*cifar);
  CHECK_THROWS_AS(cifar->forward(randn({2, 3, 28, 28})), ShapeError);
}

TEST_CASE("GPT: generate with a vanishing temperature draws greedily, never NaN", "[nn]") {
  // 1e-46 rounds to 0 in float32: dividing the logits by it made 0 / 0 for the largest one.
  manual_seed(5);
  GPT g(tiny_gpt(1));
  const Tensor prompt = tensor(std::vector<int64_t>{3, 7, 11}, {1, 3});
  Tensor greedy_next;
  {
    NoGradGuard no_grad;
    const Tensor last = g.forward(prompt).select(1, 2);
    greedy_next = argmax(last, -1);
  }
  for (const double temperature : {1e-46, 1e-30, 1e-20}) {
    INFO("temperature " << temperature);
    const Tensor out = g.generate(prompt, 1, temperature);
    CHECK(out.select(1, 3).to_vector<int64_t>() == greedy_next.to_vector<int64_t>());
  }
}
