// Channels-last models on the CPU: Module::to(MemoryFormat) converts exactly the 4-d parameters and
// buffers in place, a converted ResNet computes what the NCHW one does with channels-last
// activations and gradients, and a training step makes no hidden layout copy (layout_copy_count()).
// The CPU convolution lowers to im2col + GEMM, whose column matrix and packed filter are scratch
// memory inside the kernel by design; the counter counts the tensor-level layout conversions an op
// makes of its inputs, which are what a converted model avoids. The helpers and the slow weight
// path's check are shared with the CUDA test through tests/nn/channels_last_checks.h.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/kiln.h"
#include "core/ops/layout_stats.h"
#include "nn/optim/adamw.h"
#include "nn/optim/sgd.h"
#include "nn/resnet.h"
#include "tests/nn/channels_last_checks.h"

using namespace kiln;
using namespace kiln::nn;
using namespace kiln::test;

namespace {

// A module with a 4-d buffer, a 1-channel conv (whose NCHW and channels-last layouts hold the same
// bytes) and 1-d and 2-d tensors that must stay as they are.
class Mixed : public Module {
 public:
  Mixed() {
    // No bias: batch norm follows (and a biased conv there would spend nn's once-per-process warning).
    conv = register_module("conv", std::make_shared<Conv2d>(1, 4, Pair{3, 3}, Pair{1, 1}, Pair{0, 0}, Pair{1, 1}, 1,
                                                            false));
    bn = register_module("bn", std::make_shared<BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<Linear>(4, 2));
    stencil = register_buffer("stencil", randn({2, 3, 4, 5}));
    scale = register_parameter("scale", randn({3}));
  }
  std::string type_name() const override { return "Mixed"; }
  std::shared_ptr<Conv2d> conv;
  std::shared_ptr<BatchNorm2d> bn;
  std::shared_ptr<Linear> fc;
  Tensor stencil, scale;
};

}  // namespace

TEST_CASE("Module::to(ChannelsLast) converts exactly the 4-d parameters and buffers, in place", "[channels_last]") {
  manual_seed(3);
  auto m = std::make_shared<Mixed>();
  // A gradient already there is converted with its parameter.
  Tensor x = randn({2, 1, 6, 6});
  m->bn->forward(m->conv->forward(x)).sum().backward();
  REQUIRE(m->conv->weight.grad().defined());
  const std::vector<double> grad_before = m->conv->weight.grad().to_vector_double();

  struct Before {
    Tensor handle;
    Shape strides;
    std::vector<double> values;
  };
  std::map<std::string, Before> before;
  for (const auto& [n, t] : m->state_dict()) before[n] = {t, t.strides(), t.to_vector_double()};

  m->to(MemoryFormat::ChannelsLast);
  int converted = 0;
  for (const auto& [n, t] : m->state_dict()) {
    INFO(n << " " << shape_str(t.sizes()) << " strides " << shape_str(t.strides()));
    const Before& b = before.at(n);
    CHECK(t.is_same(b.handle));  // the same tensor object: optimizers and tied modules still hold it
    CHECK(t.to_vector_double() == b.values);
    if (t.dim() == 4) {
      CHECK(exactly_channels_last(t));
      ++converted;
    } else {
      CHECK(t.strides() == b.strides);
    }
  }
  CHECK(converted == 2);  // conv.weight and the stencil buffer
  // The 1-channel weight [4, 1, 3, 3] is contiguous either way; its strides say it was converted.
  CHECK(m->conv->weight.strides() == Shape{9, 1, 3, 1});
  CHECK(m->conv->weight.requires_grad());
  REQUIRE(m->conv->weight.grad().defined());
  CHECK(exactly_channels_last(m->conv->weight.grad()));
  CHECK(m->conv->weight.grad().to_vector_double() == grad_before);

  // Converting twice changes nothing; back to Contiguous restores row-major strides.
  m->to(MemoryFormat::ChannelsLast);
  CHECK(exactly_channels_last(m->stencil));
  m->to(MemoryFormat::Contiguous);
  CHECK(m->stencil.strides() == contiguous_strides(m->stencil.sizes()));
  CHECK(m->conv->weight.strides() == Shape{9, 9, 3, 1});
  CHECK(m->stencil.to_vector_double() == before.at("stencil").values);

  CHECK_THROWS_WITH(m->to(MemoryFormat::Preserve), Catch::Contains("Module::to") && Catch::Contains("Preserve"));
}

TEST_CASE("Module::to(ChannelsLast): an optimizer built before the conversion keeps training", "[channels_last]") {
  auto [a, b] = twin_resnets(small_resnet());
  // Convert a second NCHW copy after its optimizer exists and has state (momentum buffers).
  auto c = std::make_shared<ResNet>(small_resnet());
  c->load_state_dict(a->state_dict());
  optim::SGD opt_b(b->parameters(), 0.05, 0.9);
  optim::SGD opt_c(c->parameters(), 0.05, 0.9);
  manual_seed(4);
  const Tensor x = randn({4, 3, 12, 12});
  const Tensor target = tensor<int64_t>({1, 4, 7, 9});
  auto step = [&](ResNet& net, optim::Optimizer& opt, const Tensor& input) {
    Tensor loss = cross_entropy(net.forward(input), target);
    loss.backward();
    opt.step();
    net.zero_grad();
    return loss.item<double>();
  };
  const Tensor xcl = x.contiguous(MemoryFormat::ChannelsLast);
  step(*b, opt_b, xcl);
  step(*c, opt_c, x);
  c->to(MemoryFormat::ChannelsLast);  // the momentum state is NCHW now; the next step follows the parameters
  for (int i = 0; i < 2; ++i) {
    const double lb = step(*b, opt_b, xcl), lc = step(*c, opt_c, xcl);
    CHECK(lc == Approx(lb).epsilon(1e-4));
  }
  for (const auto& [n, p] : c->named_parameters()) {
    INFO(n);
    if (p.dim() == 4) CHECK(exactly_channels_last(p));
  }
  const auto pb = b->state_dict();
  for (const auto& [n, t] : c->state_dict()) {
    INFO(n);
    CHECK(worst_ratio(t, pb.at(n), 1e-5, 1e-3) <= 1.0);
  }
}

TEST_CASE("channels-last ResNet: forward and backward equal NCHW, in channels-last layouts", "[channels_last]") {
  for (int64_t in_channels : {3, 1}) {
    INFO("in_channels " << in_channels);
    auto [a, b] = twin_resnets(small_resnet(in_channels));
    manual_seed(8);
    const Tensor x0 = randn({4, in_channels, 16, 16});
    const Tensor xa = x0.detach().set_requires_grad(true);
    const Tensor xb = x0.contiguous(MemoryFormat::ChannelsLast).detach().set_requires_grad(true);
    const Tensor target = tensor<int64_t>({0, 3, 5, 9});

    Tensor ya = a->forward(xa);
    // The same forward, stage by stage, to see the activations' layouts.
    Tensor stem = b->relu->forward(b->bn1->forward(b->conv1->forward(xb)));
    CHECK(exactly_channels_last(stem));
    Tensor s1 = b->layers[0]->forward(stem), s2 = b->layers[1]->forward(s1), s3 = b->layers[2]->forward(s2);
    CHECK(exactly_channels_last(s1));
    CHECK(exactly_channels_last(s2));  // through the strided downsample conv and its batch norm
    CHECK(exactly_channels_last(s3));
    Tensor yb = b->fc->forward(b->flatten->forward(b->avgpool->forward(s3)));

    // float32 either way; batch norm sums its channels in another order in each layout.
    CHECK(worst_ratio(yb, ya, 1e-5, 1e-4) <= 1.0);
    cross_entropy(ya, target).backward();
    cross_entropy(yb, target).backward();

    if (in_channels > 1) CHECK(exactly_channels_last(xb.grad()));
    CHECK(worst_ratio(xb.grad(), xa.grad(), 1e-6, 1e-3) <= 1.0);
    const auto pa = a->named_parameters();
    const auto pb = b->named_parameters();
    REQUIRE(pa.size() == pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      INFO(pb[i].first);
      const Tensor& ga = pa[i].second.grad();
      const Tensor& gb = pb[i].second.grad();
      REQUIRE(gb.defined());
      if (gb.dim() == 4) CHECK(exactly_channels_last(gb));
      CHECK(worst_ratio(gb, ga, 1e-5, 1e-3) <= 1.0);
    }
    // Batch norm's running statistics moved the same way.
    const auto ba = a->named_buffers();
    const auto bb = b->named_buffers();
    for (size_t i = 0; i < ba.size(); ++i) {
      INFO(bb[i].first);
      if (ba[i].second.is_floating_point()) CHECK(worst_ratio(bb[i].second, ba[i].second, 1e-6, 1e-4) <= 1.0);
    }
  }
}

TEST_CASE("channels-last ResNet: a training step makes no hidden layout copy", "[channels_last]") {
  for (int64_t in_channels : {3, 1}) {
    INFO("in_channels " << in_channels);
    auto [a, b] = twin_resnets(small_resnet(in_channels));
    optim::AdamW opt(b->parameters(), 1e-3);
    manual_seed(9);
    const Tensor target = tensor<int64_t>({2, 4, 6, 8});
    for (int step = 0; step < 2; ++step) {  // the second step updates optimizer state made by the first
      const Tensor x = randn({4, in_channels, 16, 16}).contiguous(MemoryFormat::ChannelsLast);
      reset_layout_copy_count();
      cross_entropy(b->forward(x), target).backward();
      opt.step();
      b->zero_grad();
      INFO("step " << step << ": " << copies_str());
      CHECK(layout_copy_count() == 0);
    }
  }
}

TEST_CASE("layout copies are counted: NCHW images into a converted model, and the slow weight path",
          "[channels_last]") {
  auto [a, b] = twin_resnets(small_resnet());
  manual_seed(10);
  const Tensor x = randn({2, 3, 16, 16});
  const Tensor target = tensor<int64_t>({1, 2});

  SECTION("an NCHW model on NCHW images copies nothing") {
    reset_layout_copy_count();
    cross_entropy(a->forward(x), target).backward();
    INFO(copies_str());
    CHECK(layout_copy_count() == 0);
  }
  SECTION("a converted model converts NCHW images once, at the stem (and the stem's backward reads them again)") {
    reset_layout_copy_count();
    cross_entropy(b->forward(x), target).backward();
    INFO(copies_str());
    CHECK(layout_copy_count() == 2);
    const std::map<std::string, int64_t> expected{{"conv2d (input)", 1}, {"conv2d backward (input)", 1}};
    CHECK(layout_copy_counts() == expected);
  }
  SECTION("a channels-last input meeting an NCHW weight copies the weight every call, and its gradient back") {
    test::check_weight_copy_path(Device::cpu(), x, /*out_channels=*/6, /*slack=*/1.0);
  }
  SECTION("the counter is per thread and resets") {
    Tensor xcl = x.contiguous(MemoryFormat::ChannelsLast);
    reset_layout_copy_count();
    (void)conv2d(xcl, randn({4, 3, 3, 3}));  // (a 1x1 weight would be both layouts at once: no copy)
    CHECK(layout_copy_count() == 1);
    int64_t other_thread = -1;
    std::thread t([&] { other_thread = layout_copy_count(); });
    t.join();
    CHECK(other_thread == 0);
    reset_layout_copy_count();
    CHECK(layout_copy_count() == 0);
    CHECK(layout_copy_counts().empty());
  }
}
