// Activation recompute (nn/checkpoint.h): a recomputed GPT (with dropout) and ResNet get the very
// bits of gradients, losses and BatchNorm statistics they get without recompute, and leave the random
// stream where it would be; saved-tensor bytes drop; checkpoint_sequential equals the plain chain;
// the recompute runs under forward's autocast settings; how parameters' gradients flow (through
// the caller's engine, or reentrantly) and what hooks see; graph-capture draws; errors.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/checkpoint.h"
#include "nn/parametrize.h"
#include "nn/prune.h"
#include "nn/resnet.h"
#include "nn/transformer.h"
#include "tests/bitwise.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::test::bitwise_equal;

namespace {

GPTConfig tiny_gpt(int64_t n_layer, double dropout) {
  GPTConfig c;
  c.vocab_size = 40;
  c.block_size = 16;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = dropout;
  return c;
}

// Every parameter of `a` has a gradient, equal bit for bit to that of `b`'s parameter of the same
// name; at least one of them is not all zeros (a test of zeros against zeros proves nothing).
void check_same_grads(const Module& a, const Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  bool any_nonzero = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    REQUIRE(pa[i].first == pb[i].first);
    REQUIRE(pa[i].second.grad().defined());
    REQUIRE(pb[i].second.grad().defined());
    CHECK(bitwise_equal(pa[i].second.grad(), pb[i].second.grad()));
    any_nonzero = any_nonzero || pa[i].second.grad().abs().sum().item<float>() > 0.0f;
  }
  CHECK(any_nonzero);
}

void sgd_step(Module& m, double lr) {
  NoGradGuard no_grad;
  for (Tensor p : m.parameters())
    if (p.grad().defined()) p.sub_(p.grad(), lr);
  m.zero_grad();
}

// A small MLP-ish chain with dropout between its layers, for checkpoint_sequential.
std::shared_ptr<Sequential> make_chain(int64_t width, int64_t layers, double p) {
  auto seq = std::make_shared<Sequential>();
  for (int64_t i = 0; i < layers; ++i) {
    seq->push_back(std::make_shared<Linear>(width, width));
    seq->push_back(std::make_shared<GELU>(GeluApprox::Tanh));
    seq->push_back(std::make_shared<Dropout>(p));
  }
  return seq;
}

}  // namespace

TEST_CASE("recompute: a GPT with dropout trains to the same bits with and without recompute", "[recompute]") {
  GPTConfig cfg = tiny_gpt(3, 0.2);
  manual_seed(7);
  auto plain = std::make_shared<GPT>(cfg);
  cfg.recompute = true;
  auto recomputed = std::make_shared<GPT>(cfg);
  recomputed->load_state_dict(plain->state_dict());
  Tensor idx = randint(0, cfg.vocab_size, {2, 12});
  Tensor targets = randint(0, cfg.vocab_size, {2, 12});

  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    manual_seed(100 + static_cast<uint64_t>(step));
    Tensor loss_plain = plain->loss(idx, targets);
    loss_plain.backward();
    Tensor after_plain = randn({32});  // where the random stream stands after the step
    manual_seed(100 + static_cast<uint64_t>(step));
    Tensor loss_recomputed = recomputed->loss(idx, targets);
    loss_recomputed.backward();
    Tensor after_recomputed = randn({32});

    CHECK(bitwise_equal(loss_plain, loss_recomputed));
    check_same_grads(*plain, *recomputed);
    CHECK(bitwise_equal(after_plain, after_recomputed));
    sgd_step(*plain, 0.1);
    sgd_step(*recomputed, 0.1);
  }
  // Dropout really drew: the same step in eval mode gives another loss.
  manual_seed(100);
  Tensor train_loss = plain->loss(idx, targets);
  plain->eval();
  Tensor eval_loss = plain->loss(idx, targets);
  CHECK_FALSE(bitwise_equal(train_loss, eval_loss));
}

TEST_CASE("recompute: a transformer block's input and parameter gradients are the same bits", "[recompute]") {
  GPTConfig cfg = tiny_gpt(1, 0.25);
  manual_seed(3);
  auto block_a = std::make_shared<TransformerBlock>(cfg);
  auto block_b = std::make_shared<TransformerBlock>(cfg);
  block_b->load_state_dict(block_a->state_dict());
  Tensor x_a = randn({2, 10, cfg.n_embd}).set_requires_grad(true);
  Tensor x_b = x_a.detach().clone().set_requires_grad(true);
  Tensor cotangent = randn({2, 10, cfg.n_embd});

  manual_seed(55);
  Tensor y_a = block_a->forward(x_a);
  (y_a * cotangent).sum().backward();
  manual_seed(55);
  Tensor y_b = checkpoint(std::static_pointer_cast<UnaryModule>(block_b), x_b);
  (y_b * cotangent).sum().backward();

  CHECK(bitwise_equal(y_a, y_b));
  REQUIRE(x_b.grad().defined());
  CHECK(bitwise_equal(x_a.grad(), x_b.grad()));
  check_same_grads(*block_a, *block_b);

  // Without the random state restored, the recompute draws other masks: the gradients differ.
  // (This is what makes the equalities above a test of the restore.)
  block_b->zero_grad();
  x_b.set_grad(Tensor());
  manual_seed(55);
  CheckpointOptions no_rng;
  no_rng.preserve_rng_state = false;
  Tensor y_c = checkpoint(std::static_pointer_cast<UnaryModule>(block_b), x_b, no_rng);
  CHECK(bitwise_equal(y_a, y_c));
  (y_c * cotangent).sum().backward();
  CHECK_FALSE(bitwise_equal(x_a.grad(), x_b.grad()));
}

TEST_CASE("recompute: a ResNet's gradients and BatchNorm statistics are the same bits", "[recompute]") {
  ResNetConfig cfg;
  cfg.in_channels = 3;
  cfg.num_classes = 5;
  cfg.widths = {4, 8, 8};
  cfg.blocks = {2, 1, 1};
  manual_seed(21);
  auto plain = std::make_shared<ResNet>(cfg);
  cfg.recompute = true;
  auto recomputed = std::make_shared<ResNet>(cfg);
  recomputed->load_state_dict(plain->state_dict());
  Tensor x_plain = randn({3, 3, 12, 12}).set_requires_grad(true);
  Tensor x_recomputed = x_plain.detach().clone().set_requires_grad(true);
  Tensor labels = randint(0, cfg.num_classes, {3});

  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    x_plain.set_grad(Tensor());
    x_recomputed.set_grad(Tensor());
    Tensor loss_plain = cross_entropy(plain->forward(x_plain), labels);
    loss_plain.backward();
    Tensor loss_recomputed = cross_entropy(recomputed->forward(x_recomputed), labels);
    loss_recomputed.backward();
    CHECK(bitwise_equal(loss_plain, loss_recomputed));
    REQUIRE(x_recomputed.grad().defined());
    CHECK(bitwise_equal(x_plain.grad(), x_recomputed.grad()));
    check_same_grads(*plain, *recomputed);
    // The recompute ran each block's BatchNorms a second time; their statistics were put back, so
    // each batch counted once (num_batches_tracked included).
    auto ba = plain->named_buffers(), bb = recomputed->named_buffers();
    REQUIRE(ba.size() == bb.size());
    for (size_t i = 0; i < ba.size(); ++i) {
      INFO(ba[i].first);
      CHECK(bitwise_equal(ba[i].second, bb[i].second));
    }
    sgd_step(*plain, 0.05);
    sgd_step(*recomputed, 0.05);
  }
  CHECK(plain->layers[0]->at<BasicBlock>(0)->bn1->num_batches_tracked.item<int64_t>() == 2);
}

TEST_CASE("recompute: the random stream after a recomputed step is the one without", "[recompute]") {
  // fn drops out a tensor of ones: its output shows the mask, and the gradient of the output's sum
  // is that mask again only when the recompute drew the same one.
  auto fn = [](const Tensor& x) { return dropout(x, 0.5, true); };
  Tensor x = ones({64}).set_requires_grad(true);
  manual_seed(9);
  const PhiloxState before = default_generator().state();
  Tensor y = checkpoint(fn, x);
  const PhiloxState after_forward = default_generator().state();
  CHECK(after_forward.offset == before.offset + 1);
  Tensor drawn_between = randn({4});  // draws between forward and backward stay drawn
  y.sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(bitwise_equal(x.grad(), y));
  CHECK(default_generator().state().offset == after_forward.offset + 1);
  Tensor next_recomputed = randn({16});

  manual_seed(9);
  Tensor y_plain = fn(x);
  Tensor drawn_plain = randn({4});
  y_plain.sum().backward();
  Tensor next_plain = randn({16});
  CHECK(bitwise_equal(y, y_plain));
  CHECK(bitwise_equal(drawn_between, drawn_plain));
  CHECK(bitwise_equal(next_recomputed, next_plain));

  // Reseeded between forward and backward: the recompute still draws forward's mask (it took the
  // new seed at forward's offset), and the generator keeps its new seed afterwards.
  x.set_grad(Tensor());
  manual_seed(9);
  Tensor y2 = checkpoint(fn, x);
  manual_seed(1234);
  y2.sum().backward();
  CHECK(bitwise_equal(x.grad(), y2));
  CHECK(default_generator().seed() == 1234);
  CHECK(default_generator().state().offset == 0);
}

TEST_CASE("recompute: saved-tensor bytes of a GPT forward drop to less than half", "[recompute]") {
  GPTConfig cfg = tiny_gpt(4, 0.0);
  cfg.n_embd = 32;
  cfg.block_size = 32;
  manual_seed(5);
  auto plain = std::make_shared<GPT>(cfg);
  cfg.recompute = true;
  auto recomputed = std::make_shared<GPT>(cfg);
  recomputed->load_state_dict(plain->state_dict());
  Tensor idx = randint(0, cfg.vocab_size, {4, 32});
  Tensor targets = randint(0, cfg.vocab_size, {4, 32});

  Tensor loss_plain = plain->loss(idx, targets);
  Tensor loss_recomputed = recomputed->loss(idx, targets);
  const int64_t bytes_plain = saved_tensor_bytes(loss_plain);
  const int64_t bytes_recomputed = saved_tensor_bytes(loss_recomputed);
  INFO("saved bytes: " << bytes_plain << " without recompute, " << bytes_recomputed << " with");
  CHECK(bytes_recomputed > 0);
  CHECK(2 * bytes_recomputed < bytes_plain);
  CHECK(bitwise_equal(loss_plain, loss_recomputed));

  // One checkpointed block keeps exactly its input.
  Tensor x = randn({4, 32, cfg.n_embd}).set_requires_grad(true);
  Tensor y = checkpoint(std::static_pointer_cast<UnaryModule>(recomputed->h[0]), x);
  CHECK(saved_tensor_bytes(y) == x.numel() * 4);
  CHECK(saved_tensor_bytes(recomputed->h[0]->forward(x)) > 10 * x.numel() * 4);
}

TEST_CASE("saved_tensor_bytes: distinct storages, once each, and released graphs hold nothing", "[recompute]") {
  Tensor x = randn({8, 8}).set_requires_grad(true);
  CHECK(saved_tensor_bytes(x) == 0);  // a leaf has no graph
  Tensor y = x * x;                   // saves x twice: one storage
  CHECK(saved_tensor_bytes(y) == 8 * 8 * 4);
  Tensor w = randn({8, 8}).set_requires_grad(true);
  Tensor z = (y * w).sum();  // adds y and w
  CHECK(saved_tensor_bytes(z) == 3 * 8 * 8 * 4);
  z.backward();
  CHECK(saved_tensor_bytes(z) == 0);  // backward without retain_graph freed them
  CHECK_THROWS_WITH(saved_tensor_bytes(Tensor()),
                    Catch::Contains("saved_tensor_bytes") && Catch::Contains("undefined"));
}

TEST_CASE("checkpoint_sequential equals the plain Sequential bit for bit", "[recompute]") {
  manual_seed(13);
  auto plain = make_chain(6, 3, 0.3);  // 9 modules
  auto chained = make_chain(6, 3, 0.3);
  chained->load_state_dict(plain->state_dict());
  Tensor x0 = randn({5, 6});
  for (int64_t segments : {1, 2, 3, 4, 9}) {
    INFO("segments " << segments);
    plain->zero_grad();
    chained->zero_grad();
    Tensor xa = x0.clone().set_requires_grad(true), xb = x0.clone().set_requires_grad(true);
    manual_seed(200);
    Tensor ya = plain->forward(xa);
    ya.sum().backward();
    Tensor next_a = rand({8});
    manual_seed(200);
    Tensor yb = checkpoint_sequential(*chained, segments, xb);
    if (segments > 1) {
      REQUIRE(yb.grad_fn());
      // The last segment runs plainly; its first op's input comes out of a checkpoint node.
    }
    yb.sum().backward();
    Tensor next_b = rand({8});
    CHECK(bitwise_equal(ya, yb));
    REQUIRE(xb.grad().defined());
    CHECK(bitwise_equal(xa.grad(), xb.grad()));
    check_same_grads(*plain, *chained);
    CHECK(bitwise_equal(next_a, next_b));
  }
  // Segments save memory: with 3 segments fewer bytes are held than without.
  Tensor x = x0.clone().set_requires_grad(true);
  CHECK(saved_tensor_bytes(checkpoint_sequential(*chained, 3, x)) < saved_tensor_bytes(chained->forward(x)));
}

TEST_CASE("recompute: the recompute runs under forward's autocast settings", "[recompute]") {
  auto lin = std::make_shared<Linear>(8, 8);
  std::vector<bool> autocast_seen;
  auto fn = [&](const TensorList& in) {
    autocast_seen.push_back(autocast_state(DeviceType::CPU).enabled);
    return TensorList{relu(lin->forward(in[0]))};
  };
  CheckpointOptions opts;
  opts.params = lin->parameters();
  manual_seed(4);
  Tensor x = randn({4, 8});

  // Forward under bfloat16 autocast, backward outside it: the recompute casts as forward did.
  Tensor y;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    y = checkpoint(fn, {x.clone().set_requires_grad(true)}, opts).at(0);
  }
  CHECK(y.dtype() == DType::BFloat16);
  y.to(DType::Float32).sum().backward();
  CHECK(autocast_seen == std::vector<bool>{true, true});
  CHECK_FALSE(autocast_state(DeviceType::CPU).enabled);  // the recompute's guard is gone
  Tensor w_grad = lin->weight.grad().clone();
  CHECK(w_grad.dtype() == DType::Float32);

  lin->zero_grad();
  Tensor y_plain;
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    y_plain = relu(lin->forward(x.clone().set_requires_grad(true)));
  }
  y_plain.to(DType::Float32).sum().backward();
  CHECK(bitwise_equal(y, y_plain));
  CHECK(bitwise_equal(w_grad, lin->weight.grad()));

  // Forward outside autocast, backward inside an autocast region: the recompute runs in float32.
  autocast_seen.clear();
  lin->zero_grad();
  Tensor z = checkpoint(fn, {x.clone().set_requires_grad(true)}, opts).at(0);
  {
    AutocastGuard guard(DeviceType::CPU, DType::BFloat16);
    z.sum().backward();
  }
  CHECK(autocast_seen == std::vector<bool>{false, false});
  CHECK(z.dtype() == DType::Float32);
}

TEST_CASE("recompute: segments sharing a weight under autocast cast it afresh in each recompute", "[recompute]") {
  // One weight in two checkpointed segments (a block applied twice), forward under bfloat16
  // autocast: each recompute must make its own cast of the weight, not take the one an earlier
  // recompute (or, with backward inside the region, the forward) cached, whose history is older.
  manual_seed(6);
  Tensor w = (randn({4, 4}) * 0.5).set_requires_grad(true);
  const Tensor x0 = randn({2, 4});
  CheckpointOptions opts;
  opts.params = {w};
  auto block = [&](const TensorList& in) { return TensorList{tanh(matmul(in[0], w))}; };
  // Gradients of w and x; backward inside the autocast region or after it; two micro-batches
  // accumulated (the second reuses what the first left in the cache).
  auto run = [&](bool recompute, bool backward_inside) {
    w.set_grad(Tensor());
    Tensor x = x0.clone().set_requires_grad(true);
    for (int micro = 0; micro < 2; ++micro) {
      std::optional<AutocastGuard> guard;
      guard.emplace(DeviceType::CPU, DType::BFloat16);
      Tensor h = x;
      for (int i = 0; i < 2; ++i) h = recompute ? checkpoint(block, {h}, opts).at(0) : block({h}).at(0);
      Tensor loss = h.to(DType::Float32).sum();
      if (!backward_inside) guard.reset();  // the docs' loop: leave the region, then backward
      loss.backward();
    }
    return TensorList{w.grad().clone(), x.grad().clone()};
  };
  for (const bool inside : {false, true}) {
    INFO((inside ? "backward inside the autocast region" : "backward after it"));
    const TensorList plain = run(false, inside), recomputed = run(true, inside);
    // The weight's gradient within one bfloat16 rounding: the plain run's one cast sums the two
    // segments' bfloat16 gradients before its backward converts them, each recompute's own cast
    // converts its segment's, and the float32 gradients add.
    const double scale = max(abs(plain[0])).item<double>();
    CHECK(max(abs(plain[0] - recomputed[0])).item<double>() <= scale * 0x1p-7);
    CHECK(bitwise_equal(plain[1], recomputed[1]));
  }
}

TEST_CASE("recompute: parameter gradients flow through the caller's engine when listed", "[recompute]") {
  manual_seed(31);
  auto lin = std::make_shared<Linear>(5, 3);
  Tensor x = randn({4, 5});  // no input requires grad: the listed params still make a node
  auto fn = [&](const TensorList& in) { return TensorList{tanh(lin->forward(in[0]))}; };

  Tensor plain_loss = fn({x})[0].sum();
  TensorList plain = kiln::grad({plain_loss}, {lin->weight, lin->bias});

  CheckpointOptions opts;
  opts.params = lin->parameters();
  Tensor y = checkpoint(fn, {x}, opts).at(0);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "checkpoint");
  CHECK(saved_tensor_bytes(y) == x.numel() * 4);
  // kiln::grad over parameters works, and leaves .grad alone.
  TensorList got = kiln::grad({y.sum()}, {lin->weight, lin->bias});
  CHECK(bitwise_equal(got[0], plain[0]));
  CHECK(bitwise_equal(got[1], plain[1]));
  CHECK_FALSE(lin->weight.grad().defined());

  // Hooks and callbacks on parameters run in the caller's backward: a callback queued by the
  // weight's post-accumulate hook runs at its end, after the input's gradient arrived.
  Tensor xin = x.clone().set_requires_grad(true);
  bool input_grad_at_callback = false;
  int post_hooks = 0;
  lin->weight.register_post_accumulate_grad_hook([&](Tensor&) {
    ++post_hooks;
    queue_backward_callback([&] { input_grad_at_callback = xin.grad().defined(); });
  });
  checkpoint(fn, {xin}, opts).at(0).sum().backward();
  CHECK(post_hooks == 1);
  CHECK(input_grad_at_callback);
  CHECK(bitwise_equal(lin->weight.grad(), plain[0]));
}

TEST_CASE("recompute: unlisted parameters get their gradients the reentrant way", "[recompute]") {
  manual_seed(32);
  auto lin = std::make_shared<Linear>(5, 3);
  auto fn = [&](const TensorList& in) { return TensorList{tanh(lin->forward(in[0]))}; };
  Tensor x = randn({4, 5});

  Tensor x_plain = x.clone().set_requires_grad(true);
  fn({x_plain})[0].sum().backward();
  Tensor w_plain = lin->weight.grad().clone(), b_plain = lin->bias.grad().clone();
  lin->zero_grad();

  Tensor xin = x.clone().set_requires_grad(true);
  bool input_grad_at_callback = true;
  bool input_grad_at_outer_callback = false;
  lin->weight.register_post_accumulate_grad_hook([&](Tensor&) {
    queue_backward_callback([&] { input_grad_at_callback = xin.grad().defined(); });
    queue_outer_backward_callback([&] { input_grad_at_outer_callback = xin.grad().defined(); });
  });
  Tensor y = checkpoint(fn, {xin}).at(0);
  y.sum().backward();
  CHECK(bitwise_equal(lin->weight.grad(), w_plain));
  CHECK(bitwise_equal(lin->bias.grad(), b_plain));
  REQUIRE(xin.grad().defined());
  CHECK(bitwise_equal(xin.grad(), x_plain.grad()));
  // The nested backward ran the callback at its own end, before the input's gradient arrived; the
  // one for the outermost pass (DDP's and ZeRO's) ran at the end of the caller's backward.
  CHECK_FALSE(input_grad_at_callback);
  CHECK(input_grad_at_outer_callback);

  // No input requires grad and nothing is listed: fn runs with its graph kept, so the parameters
  // still get their gradients (PyTorch's reentrant checkpoint would give them none).
  lin->zero_grad();
  Tensor z = checkpoint(fn, {x}).at(0);
  REQUIRE(z.grad_fn());
  CHECK(z.grad_fn()->name() != "checkpoint");
  z.sum().backward();
  CHECK(bitwise_equal(lin->weight.grad(), w_plain));
}

TEST_CASE("recompute: hooks inside fn run once per backward, fn's body twice", "[recompute]") {
  auto lin = std::make_shared<Linear>(4, 4);
  int calls = 0, inner_hooks = 0, input_hooks = 0, output_hooks = 0;
  auto fn = [&](const TensorList& in) {
    ++calls;
    Tensor h = lin->forward(in[0]);
    // In forward fn runs without grad, so h has no gradient to hook: only the recompute's h does.
    if (h.requires_grad()) {
      h.register_hook([&](const Tensor&) {
        ++inner_hooks;
        return Tensor();
      });
    }
    return TensorList{gelu(h)};
  };
  CheckpointOptions opts;
  opts.params = lin->parameters();
  Tensor x = randn({3, 4}).set_requires_grad(true);
  x.register_hook([&](const Tensor&) {
    ++input_hooks;
    return Tensor();
  });
  Tensor y = checkpoint(fn, {x}, opts).at(0);
  y.register_hook([&](const Tensor& g) {
    ++output_hooks;
    return g * 2.0;  // a hook on the output changes the gradient the recompute differentiates
  });
  CHECK(calls == 1);
  CHECK(inner_hooks == 0);
  y.sum().backward();
  CHECK(calls == 2);
  CHECK(inner_hooks == 1);
  CHECK(input_hooks == 1);
  CHECK(output_hooks == 1);

  Tensor x2 = x.detach().clone().set_requires_grad(true);
  lin->zero_grad();
  (gelu(lin->forward(x2)) * 2.0).sum().backward();
  CHECK(bitwise_equal(x.grad(), x2.grad()));
}

TEST_CASE("recompute: a module's forward pre-hooks run in forward and again in the recompute", "[recompute]") {
  // A pruned Linear: its pre-hook computes weight = weight_orig * weight_mask each call, so the
  // recompute's weight carries the history that backward differentiates into weight_orig.
  auto make = [] {
    manual_seed(31);
    auto lin = std::make_shared<Linear>(6, 5);
    prune::l1_unstructured(*lin, "weight", lin->weight, prune::Amount(0.4));
    return lin;
  };
  auto plain = make(), recomputed = make();
  int calls = 0;
  recomputed->register_forward_pre_hook([&](Module&) { ++calls; });
  manual_seed(32);
  const Tensor x = randn({3, 6});
  square((*plain)(x)).sum().backward();
  square(checkpoint(std::static_pointer_cast<UnaryModule>(recomputed), x)).sum().backward();
  CHECK(calls == 2);
  const Tensor& orig = recomputed->get_parameter("weight_orig").grad();
  REQUIRE(orig.defined());
  CHECK(bitwise_equal(orig, plain->get_parameter("weight_orig").grad()));
  // The pruned entries get no gradient.
  CHECK(sum(abs(mul(orig, logical_not(recomputed->get_buffer("weight_mask"))))).item<float>() == 0.0f);

  // A parametrization's pre-hook the same way: the recompute's weight, tanh(original), carries the
  // history into the original.
  struct Tanh final : Parametrization {
    std::string type_name() const override { return "Tanh"; }
    Tensor forward(const TensorList& originals) override { return tanh(originals.at(0)); }
  };
  auto make_parametrized = [] {
    manual_seed(33);
    auto lin = std::make_shared<Linear>(6, 5);
    register_parametrization(*lin, "weight", lin->weight, std::make_shared<Tanh>(), /*unsafe=*/true);
    return lin;
  };
  auto plain_p = make_parametrized(), recomputed_p = make_parametrized();
  square((*plain_p)(x)).sum().backward();
  square(checkpoint(std::static_pointer_cast<UnaryModule>(recomputed_p), x)).sum().backward();
  const Tensor got = parametrization_list(*recomputed_p, "weight")->originals().at(0).grad();
  REQUIRE(got.defined());
  CHECK(bitwise_equal(got, parametrization_list(*plain_p, "weight")->originals().at(0).grad()));
}

TEST_CASE("recompute: a hook on a listed parameter runs once, as without recompute", "[recompute]") {
  Tensor w = ones({3}).set_requires_grad(true);
  int calls = 0;
  w.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 2.0;
  });
  auto fn = [&](const TensorList& in) { return TensorList{in[0] * w}; };
  const Tensor x = full({3}, 5.0).set_requires_grad(true);
  fn({x})[0].sum().backward();
  REQUIRE(calls == 1);
  const Tensor plain = w.grad().clone();
  w.set_grad(Tensor());
  CheckpointOptions opts;
  opts.params = {w};
  checkpoint(fn, {x}, opts)[0].sum().backward();
  CHECK(calls == 2);  // before: 3, and a gradient doubled twice
  CHECK(bitwise_equal(w.grad(), plain));
}

TEST_CASE("recompute: outputs that alias inputs, integer outputs, several outputs, retain_graph", "[recompute]") {
  // Small integers: every sum is exact, so the gradients compare bitwise whatever the order in
  // which the engines add contributions.
  Tensor x = randint(-3, 4, {6}).to(DType::Float32).set_requires_grad(true);
  Tensor w = randint(-3, 4, {6}).to(DType::Float32).set_requires_grad(true);
  auto fn = [&](const TensorList& in) {
    return TensorList{in[0], in[0] * w, gt(in[0], 0.0).to(DType::Int64), in[0] * w};
  };
  CheckpointOptions opts;
  opts.params = {w};
  TensorList out = checkpoint(fn, {x}, opts);
  REQUIRE(out.size() == 4);
  CHECK_FALSE(out[0].is_same(x));  // recording it must not rewrite x's history
  CHECK(x.is_leaf());
  CHECK(out[2].dtype() == DType::Int64);
  CHECK_FALSE(out[2].requires_grad());
  CHECK(out[1].grad_fn() == out[3].grad_fn());
  Tensor loss = (out[0] * 3.0 + out[1] + out[3] * out[3]).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();  // a second backward recomputes again and accumulates

  Tensor x2 = x.detach().clone().set_requires_grad(true), w2 = w.detach().clone().set_requires_grad(true);
  Tensor b = x2 * w2, d = x2 * w2;
  Tensor loss2 = (x2 * 3.0 + b + d * d).sum();
  loss2.backward(Tensor(), true);
  loss2.backward();
  CHECK(bitwise_equal(x.grad(), x2.grad()));
  CHECK(bitwise_equal(w.grad(), w2.grad()));
}

TEST_CASE("recompute: a GPT with recompute generates and evaluates as without", "[recompute]") {
  GPTConfig cfg = tiny_gpt(2, 0.1);
  manual_seed(8);
  auto plain = std::make_shared<GPT>(cfg);
  cfg.recompute = true;
  auto recomputed = std::make_shared<GPT>(cfg);
  recomputed->load_state_dict(plain->state_dict());
  plain->eval();
  recomputed->eval();
  Tensor idx = randint(0, cfg.vocab_size, {2, 4});
  manual_seed(1);
  Tensor a = plain->generate(idx, 6, 1.0, 5);
  manual_seed(1);
  Tensor b = recomputed->generate(idx, 6, 1.0, 5);
  CHECK(bitwise_equal(a, b));
  CHECK(bitwise_equal(plain->forward(idx), recomputed->forward(idx)));
}

TEST_CASE("recompute under a graph capture leaves the generator's host state alone", "[recompute]") {
  Generator& g = default_generator();
  g.manual_seed(77);
  Tensor x = ones({64}).set_requires_grad(true);
  GeneratorCapture capture(Device::cpu());
  g.next();                  // gives the capture its entry for g ...
  capture.prepare_replay();  // ... and writes its {seed, offset base}, so draws read defined words
  const PhiloxState host = g.state();
  Tensor y = checkpoint([](const Tensor& t) { return dropout(t, 0.5, true); }, x);
  y.sum().backward();
  CHECK(g.state().offset == host.offset);
  CHECK(g.state().seed == host.seed);
  capture.end();
  REQUIRE(x.grad().defined());
}

// Inside a capture the recompute rewinds the capture's draw counter (Generator::set_position), so
// it differentiates forward's mask, and the replay reserves no more draws than forward made.
TEST_CASE("recompute under a graph capture redraws forward's dropout mask", "[recompute]") {
  Generator& g = default_generator();
  g.manual_seed(78);
  Tensor x = ones({256}).set_requires_grad(true);
  GeneratorCapture capture(Device::cpu());
  g.next();
  capture.prepare_replay();
  Tensor y = checkpoint([](const Tensor& t) { return dropout(t, 0.5, true); }, x);
  y.sum().backward();
  capture.end();
  REQUIRE(x.grad().defined());
  CHECK(bitwise_equal(x.grad(), y));
  CHECK(capture.draws(0) == 2);  // the setup draw and forward's; the recompute should take none
}

TEST_CASE("recompute: errors name checkpoint and the offending value", "[recompute]") {
  Tensor x = randn({3}).set_requires_grad(true);
  CHECK_THROWS_WITH(checkpoint(CheckpointFn(), {x}), Catch::Contains("checkpoint") && Catch::Contains("empty"));
  CHECK_THROWS_WITH(checkpoint(std::function<Tensor(const Tensor&)>(), x), Catch::Contains("checkpoint"));
  CHECK_THROWS_WITH(checkpoint(std::shared_ptr<UnaryModule>(), x), Catch::Contains("checkpoint") &&
                                                                        Catch::Contains("null"));
  CHECK_THROWS_WITH(checkpoint([](const TensorList&) { return TensorList{}; }, {x}),
                    Catch::Contains("checkpoint: fn returned no tensors"));
  CHECK_THROWS_WITH(checkpoint([](const TensorList& in) { return TensorList{in[0] * 2.0, Tensor()}; }, {x}),
                    Catch::Contains("checkpoint") && Catch::Contains("undefined tensor at output 1 of 2"));
  // Without grad mode too: fn's outputs are checked either way.
  {
    NoGradGuard no_grad;
    CHECK_THROWS_WITH(checkpoint([](const TensorList&) { return TensorList{}; }, {x}),
                      Catch::Contains("checkpoint: fn returned no tensors"));
  }

  // A recompute that returns other shapes or another count than forward did.
  int calls = 0;
  Tensor y = checkpoint([&](const Tensor& t) { return ++calls == 1 ? t * 2.0 : cat({t, t}, 0); }, x);
  CHECK_THROWS_WITH(y.sum().backward(), Catch::Contains("checkpoint") && Catch::Contains("[6]") &&
                                            Catch::Contains("[3]"));
  calls = 0;
  TensorList two = checkpoint(
      [&](const TensorList& in) { return ++calls == 1 ? TensorList{in[0] * 2.0, in[0] * 3.0} : TensorList{in[0]}; },
      {x});
  CHECK_THROWS_WITH(two[0].sum().backward(), Catch::Contains("checkpoint") && Catch::Contains("returned 1 tensors") &&
                                                 Catch::Contains("forward returned 2"));

  // An input modified in place between forward and backward.
  Tensor a = randn({4}).set_requires_grad(true);
  Tensor b = a * 1.0;
  Tensor c = checkpoint([](const Tensor& t) { return t * t; }, b);
  {
    NoGradGuard no_grad;
    b.add_(1.0);
  }
  CHECK_THROWS_WITH(c.sum().backward(), Catch::Contains("checkpoint") && Catch::Contains("in-place"));

  // A second backward without retain_graph.
  Tensor d = checkpoint([](const Tensor& t) { return t * t; }, x);
  Tensor ds = d.sum();
  ds.backward();
  CHECK_THROWS_WITH(ds.backward(), Catch::Contains("checkpoint") && Catch::Contains("second time"));

  // Listed params that miss one: the unlisted tensor is named by its shape.
  Tensor w = randn({3}).set_requires_grad(true), v = randn({3}).set_requires_grad(true);
  CheckpointOptions opts;
  opts.params = {w};
  Tensor e = checkpoint([&](const Tensor& t) { return t * w * v; }, x, opts);
  CHECK_THROWS_WITH(e.sum().backward(), Catch::Contains("checkpoint") && Catch::Contains("CheckpointOptions::params") &&
                                            Catch::Contains("[3]"));
  // Listed params and nothing requiring grad among them or the inputs, but fn reads another that
  // does: an error in forward already.
  Tensor frozen = randn({3});
  opts.params = {frozen};
  CHECK_THROWS_WITH(checkpoint([&](const Tensor& t) { return t * v; }, frozen, opts),
                    Catch::Contains("checkpoint") && Catch::Contains("CheckpointOptions::params"));

  // fn reads history from outside its inputs.
  Tensor outside = x * 2.0;
  Tensor f = checkpoint([&](const Tensor& t) { return t * outside; }, randn({3}).set_requires_grad(true));
  CHECK_THROWS_WITH(f.sum().backward(), Catch::Contains("checkpoint") && Catch::Contains("autograd history"));

  // checkpoint_sequential's arguments.
  auto chain = make_chain(3, 1, 0.0);  // 3 modules
  Tensor in = randn({2, 3}).set_requires_grad(true);
  CHECK_THROWS_WITH(checkpoint_sequential(*chain, 0, in), Catch::Contains("checkpoint_sequential") &&
                                                              Catch::Contains("got 0") && Catch::Contains("(3)"));
  CHECK_THROWS_WITH(checkpoint_sequential(*chain, 4, in), Catch::Contains("checkpoint_sequential") &&
                                                              Catch::Contains("got 4"));
  CHECK_THROWS_WITH(checkpoint_sequential(std::vector<std::shared_ptr<UnaryModule>>{}, 1, in),
                    Catch::Contains("checkpoint_sequential") && Catch::Contains("no modules"));
  CHECK_THROWS_WITH(
      checkpoint_sequential(std::vector<std::shared_ptr<UnaryModule>>{(*chain)[0], nullptr}, 1, in),
      Catch::Contains("checkpoint_sequential") && Catch::Contains("module 1 of 2 is null"));
}
