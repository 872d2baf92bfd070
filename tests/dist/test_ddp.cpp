// DistributedDataParallel under mpirun (1 to 4 ranks): training on each rank's share of a global
// batch equals training on the whole batch in one process, whatever the bucket size; no_sync
// accumulates without communicating; a parameter without a gradient is refused by name, or counted
// as zero with find_unused_parameters; ZeRO-1's sharded AdamW equals DDP's with 1/N of the state,
// saves DDP's state and loads it, and its clip by the global norm equals a clip after DDP.
// float64 throughout, so "equals" is within a few ulps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/kiln.h"
#include "dist/ddp.h"
#include "dist/sync_batch_norm.h"
#include "dist/zero.h"
#include "nn/amp/grad_scaler.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/optim/adamw.h"
#include "nn/optim/classic.h"
#include "nn/optim/clip.h"
#include "nn/optim/composed.h"
#include "nn/optim/sgd.h"
#include "tests/bitwise.h"
#include "tests/worst_ratio.h"

using namespace kiln;
using namespace kiln::dist;

namespace {

nn::optim::ParamGroup lr_group(TensorList params, double lr) {
  nn::optim::ParamGroup g;
  g.params = std::move(params);
  g.lr = lr;
  return g;
}

std::unique_ptr<nn::optim::Optimizer> make_sgd(std::vector<nn::optim::ParamGroup> groups) {
  return std::make_unique<nn::optim::SGD>(std::move(groups), /*momentum=*/0.9);
}

std::unique_ptr<nn::optim::Optimizer> make_sgd_plain(std::vector<nn::optim::ParamGroup> groups) {
  return std::make_unique<nn::optim::SGD>(std::move(groups));
}

std::unique_ptr<nn::optim::Optimizer> make_adamw(std::vector<nn::optim::ParamGroup> groups) {
  return std::make_unique<nn::optim::AdamW>(std::move(groups));
}

// Adam with every option that adds state or changes the update: L2 decay (the groups'), amsgrad,
// maximize (the loss is then climbed: fine for a comparison).
std::unique_ptr<nn::optim::Optimizer> make_adam_amsgrad(std::vector<nn::optim::ParamGroup> groups) {
  return std::make_unique<nn::optim::Adam>(std::move(groups), std::make_pair(0.9, 0.6), 1e-8, /*amsgrad=*/true,
                                           /*maximize=*/true);
}

constexpr int64_t kGlobalBatch = 12;  // divisible by every world size the tests run at (1 to 4)

std::shared_ptr<nn::Sequential> make_model(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 3)});
  m->to(DType::Float64);
  return m;
}

// Global batch `step`: the same on every rank.
std::pair<Tensor, Tensor> global_batch(int64_t step) {
  Generator g(77 + static_cast<uint64_t>(step));
  return {randn({kGlobalBatch, 6}, TensorOptions(DType::Float64), g),
          randn({kGlobalBatch, 3}, TensorOptions(DType::Float64), g)};
}

// This rank's rows of a global batch: rows r, r + n, r + 2n, ... (a distributed sampler's split).
Tensor share(const Tensor& t, const ProcessGroup& g) {
  std::vector<int64_t> rows;
  for (int64_t i = g.rank(); i < t.size(0); i += g.size()) rows.push_back(i);
  return index_select(t, 0, tensor(rows));
}

// Storages behind the parameters' gradients, counted once each; every bucket's must be one storage
// of its own or the count is 0.
size_t gradient_storages(nn::Module& m, const DistributedDataParallel& ddp) {
  const TensorList params = m.parameters();
  std::vector<const void*> seen;
  for (const std::vector<size_t>& bucket : ddp.buckets()) {
    std::vector<const void*> mine;
    for (size_t i : bucket) {
      const void* st = params[i].grad().storage().get();
      if (std::find(mine.begin(), mine.end(), st) == mine.end()) mine.push_back(st);
    }
    for (const void* st : mine) {
      if (std::find(seen.begin(), seen.end(), st) != seen.end()) return 0;  // shared with another bucket
      seen.push_back(st);
    }
  }
  return seen.size();
}

// Parameters whose gradient is defined.
int gradients_held(nn::Module& m) {
  int n = 0;
  for (const Tensor& p : m.parameters()) n += p.grad().defined() ? 1 : 0;
  return n;
}

double max_param_diff(nn::Module& a, nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double d = 0;
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, max(abs(pa[i] - pb[i])).item<double>());
  return d;
}

// `steps` MSE steps on global batches first_batch, first_batch + 1, ..., each rank on its share:
// a DDP-wrapped model with its optimizer, and a model stepped by ZeRO.
void step_both(nn::Sequential& ddp_model, nn::optim::Optimizer& ddp_opt, nn::Sequential& zero_model,
               ZeroRedundancyOptimizer& zero, ProcessGroup& g, int64_t steps, int64_t first_batch) {
  for (int64_t step = 0; step < steps; ++step) {
    auto [x, y] = global_batch(first_batch + step);
    ddp_opt.zero_grad();
    mse_loss(ddp_model(share(x, g)), share(y, g)).backward();
    ddp_opt.step();
    zero.zero_grad();
    mse_loss(zero_model(share(x, g)), share(y, g)).backward();
    zero.step();
  }
}

// Data-parallel SGD (lr 0.1, momentum 0.9) over `model`, a bucket per parameter: kind 0 is DDP with
// a plain optimizer, 1 and 2 are ZeRO of that stage.
struct DataParallelSgd {
  std::optional<DistributedDataParallel> ddp;
  std::optional<nn::optim::SGD> ddp_opt;
  std::optional<ZeroRedundancyOptimizer> zero;

  DataParallelSgd(int kind, const std::shared_ptr<nn::Sequential>& model, ProcessGroup& g) {
    if (kind == 0) {
      DDPOptions o;
      o.bucket_bytes = 100;
      ddp.emplace(model, g, o);
      ddp_opt.emplace(model->parameters(), 0.1, 0.9);
    } else {
      ZeroOptions o;
      o.bucket_bytes = 100;
      o.stage = kind;
      zero.emplace(std::vector<nn::optim::ParamGroup>{lr_group(model->parameters(), 0.1)}, g, make_sgd, o);
    }
  }
  static const char* name(int kind) { return kind == 0 ? "DDP" : kind == 1 ? "ZeRO-1" : "ZeRO-2"; }
  int64_t reductions() const { return ddp ? ddp->reductions() : zero->reductions(); }
  void zero_grad() {
    if (ddp) {
      ddp_opt->zero_grad();
    } else {
      zero->zero_grad();
    }
  }
  void step() {
    if (ddp) {
      ddp_opt->step();
    } else {
      zero->step();
    }
  }
};

}  // namespace

TEST_CASE("ddp: training on shares of the global batch equals training on all of it", "[ddp]") {
  ProcessGroup& g = world();
  for (const bool as_views : {false, true}) {
    for (int64_t bucket_bytes : {int64_t{25} << 20, int64_t{200}}) {
      INFO("ranks " << g.size() << ", bucket_bytes " << bucket_bytes << ", gradient_as_bucket_view " << as_views);
      auto reference = make_model(1000);  // rank 0's initial weights
      auto local = make_model(1000 + static_cast<uint64_t>(g.rank()));  // DDP must overwrite them with rank 0's
      DDPOptions o;
      o.bucket_bytes = bucket_bytes;
      o.gradient_as_bucket_view = as_views;
      DistributedDataParallel ddp(local, g, o);
      CHECK(max_param_diff(*reference, *local) == 0.0);
      if (bucket_bytes == 200) {
        CHECK(ddp.buckets().size() > 2);
        CHECK(ddp.buckets().front().front() == local->parameters().size() - 1);  // reverse registration order
      } else {
        CHECK(ddp.buckets().size() == 1);
      }
      nn::optim::SGD ref_opt(reference->parameters(), 0.1), opt(local->parameters(), 0.1);
      for (int64_t step = 0; step < 3; ++step) {
        auto [x, y] = global_batch(step);
        ref_opt.zero_grad();
        mse_loss((*reference)(x), y).backward();
        ref_opt.step();
        opt.zero_grad(/*set_to_none=*/step != 1);  // views: a new gradient copied in, or accumulated in place
        mse_loss((*local)(share(x, g)), share(y, g)).backward();
        CHECK(ddp.reductions() == static_cast<int64_t>(ddp.buckets().size()));
        // With views, every bucket's gradients lie in one buffer of their own; without, each in its own.
        CHECK(gradient_storages(*local, ddp) == (as_views ? ddp.buckets().size() : local->parameters().size()));
        opt.step();
      }
      CHECK(max_param_diff(*reference, *local) < 1e-12);
    }
  }
}

TEST_CASE("ddp: a bucket's all-reduce runs while backward goes on", "[ddp][async]") {
  ProcessGroup& g = world();
  if (g.size() == 1) return;
  // Rank 1 holds back its first bucket (the last layer's bias) until rank 0 reaches the first
  // layer's weight, which backward produces last. Rank 0 gets there only if its first bucket's
  // all-reduce, which waits for rank 1, did not stop its backward: without the overlap this
  // deadlocks.
  auto reference = make_model(2000);
  auto local = make_model(2000);
  const size_t last = local->parameters().size() - 1;
  Tensor go = zeros({1});
  if (g.rank() == 1) {  // registered before DDP's hook, so it runs first
    local->parameters()[last].register_post_accumulate_grad_hook([&](Tensor&) { g.recv(go, 0, 12); });
  }
  DDPOptions o;
  o.bucket_bytes = 200;
  DistributedDataParallel ddp(local, g, o);
  REQUIRE(ddp.buckets().front() == std::vector<size_t>{last});
  if (g.rank() == 0) {
    local->parameters()[0].register_post_accumulate_grad_hook([&](Tensor&) {
      CHECK(ddp.reductions() >= 1);  // the first bucket is in flight
      g.send(go, 1, 12);
    });
  }
  auto [x, y] = global_batch(20);
  mse_loss((*reference)(x), y).backward();
  mse_loss((*local)(share(x, g)), share(y, g)).backward();
  auto pr = reference->parameters(), pl = local->parameters();
  for (size_t i = 0; i < pr.size(); ++i) CHECK(max(abs(pr[i].grad() - pl[i].grad())).item<double>() < 1e-12);
}

namespace {

// Two linear layers registered last one first: DDP's buckets (reverse registration) then start with
// the layer backward reaches last.
struct Swapped : nn::UnaryModule {
  std::shared_ptr<nn::Linear> second, first;
  explicit Swapped(uint64_t seed) {
    manual_seed(seed);
    second = register_module("second", std::make_shared<nn::Linear>(16, 3));
    first = register_module("first", std::make_shared<nn::Linear>(6, 16));
    to(DType::Float64);
  }
  std::string type_name() const override { return "Swapped"; }
  Tensor forward(const Tensor& x) override { return (*second)((*first)(x)); }
};

// Watches backward from hooks registered before DDP's or ZeRO's (so they run first): the
// parameters in the order their gradients came, and the reductions issued (and, where `held` is set,
// the gradients held) when the last one came.
struct Arrivals {
  std::function<int64_t()> reductions;  // set once the DDP or ZeRO exists
  std::function<int64_t()> held;        // optional
  std::vector<size_t> fired;
  int64_t at_last = -1, held_at_last = -1;
  explicit Arrivals(const TensorList& params) {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].register_post_accumulate_grad_hook([this, i](Tensor&) {
        fired.push_back(i);
        at_last = reductions();
        if (held) held_at_last = held();
      });
    }
  }
  Arrivals(const Arrivals&) = delete;
  Arrivals& operator=(const Arrivals&) = delete;
};

}  // namespace

TEST_CASE("ddp: after the first backward, buckets go in the order it completed them", "[ddp]") {
  ProcessGroup& g = world();
  INFO("ranks " << g.size() << ", rank " << g.rank());
  auto reference = std::make_shared<Swapped>(6000);
  auto local = std::make_shared<Swapped>(6000);
  Arrivals arrivals(local->parameters());  // second.weight, second.bias, first.weight, first.bias
  DDPOptions o;
  o.bucket_bytes = 100;  // a bucket per parameter: first.bias, first.weight, second.bias, second.weight
  DistributedDataParallel ddp(local, g, o);
  arrivals.reductions = [&] { return ddp.reductions(); };
  REQUIRE(ddp.buckets().size() == 4);
  nn::optim::SGD ref_opt(reference->parameters(), 0.1), opt(local->parameters(), 0.1);
  std::vector<int64_t> at_last;  // per backward: all-reduces issued before the last gradient came
  for (int64_t step = 0; step < 3; ++step) {
    auto [x, y] = global_batch(160 + step);
    ref_opt.zero_grad();
    mse_loss((*reference)(x), y).backward();
    ref_opt.step();
    arrivals.fired.clear();
    opt.zero_grad();
    mse_loss((*local)(share(x, g)), share(y, g)).backward();
    REQUIRE(arrivals.fired.size() == 4);
    CHECK((arrivals.fired.back() == 2 || arrivals.fired.back() == 3));  // the first layer's gradients come last
    at_last.push_back(arrivals.at_last);
    opt.step();
  }
  // The buckets' own order starts with a first-layer bucket, complete only at the end: the first
  // backward issues at most one bucket before the last gradient. Then all but the last one's.
  CHECK(at_last[0] <= 1);
  CHECK(at_last[1] == 3);
  CHECK(at_last[2] == 3);
  CHECK(max_param_diff(*reference, *local) < 1e-12);
}

TEST_CASE("ddp: no_sync accumulates locally, and the next backward reduces the sum", "[ddp]") {
  ProcessGroup& g = world();
  // With gradient_as_bucket_view, the second round accumulates into the views a step left behind
  // (zero_grad without setting them to none), under no_sync too.
  for (const bool as_views : {false, true}) {
    INFO("ranks " << g.size() << ", gradient_as_bucket_view " << as_views);
    auto reference = make_model(5);
    auto local = make_model(5);
    DDPOptions o;
    o.gradient_as_bucket_view = as_views;
    DistributedDataParallel ddp(local, g, o);
    for (int round = 0; round < 2; ++round) {
      for (Tensor p : reference->parameters()) p.set_grad(Tensor());
      for (Tensor p : local->parameters()) {
        if (round == 0) {
          p.set_grad(Tensor());
        } else {
          p.mutable_grad().zero_();
        }
      }
      auto [x0, y0] = global_batch(10 + 2 * round);
      auto [x1, y1] = global_batch(11 + 2 * round);
      (mse_loss((*reference)(x0), y0) + mse_loss((*reference)(x1), y1)).backward();
      {
        auto guard = ddp.no_sync();
        mse_loss((*local)(share(x0, g)), share(y0, g)).backward();
      }
      CHECK(ddp.reductions() == 0);
      mse_loss((*local)(share(x1, g)), share(y1, g)).backward();
      CHECK(ddp.reductions() == 1);
      auto pr = reference->parameters(), pl = local->parameters();
      for (size_t i = 0; i < pr.size(); ++i) CHECK(max(abs(pr[i].grad() - pl[i].grad())).item<double>() < 1e-12);
      CHECK(gradient_storages(*local, ddp) == (as_views ? 1U : pl.size()));
    }
  }
}

TEST_CASE("ddp: gradient_as_bucket_view keeps a channels-last weight's layout, and one buffer instead of two",
          "[ddp]") {
  ProcessGroup& g = world();
  auto make = [] {
    manual_seed(17);
    auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Conv2d>(3, 8, Pair{3, 3}), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Conv2d>(8, 4, Pair{3, 3})});
    m->to(DType::Float64);
    m->to(MemoryFormat::ChannelsLast);
    return m;
  };
  auto plain = make();
  auto viewed = make();
  // When backward reaches the first layer's weight (this hook runs before DDP's), the second layer's
  // gradients are already views of the one bucket: each was copied in by its own hook, and freed.
  int64_t shared_at_first = -1;
  viewed->parameters()[0].register_post_accumulate_grad_hook([&](Tensor&) {
    const TensorList p = viewed->parameters();
    shared_at_first = p[2].grad().storage() == p[3].grad().storage() ? 1 : 0;
  });
  DistributedDataParallel plain_ddp(plain, g);
  DDPOptions o;
  o.gradient_as_bucket_view = true;
  DistributedDataParallel viewed_ddp(viewed, g, o);
  int64_t gradient_bytes = 0;
  for (const Tensor& p : plain->parameters()) gradient_bytes += p.numel() * 8;
  for (int64_t step = 0; step < 3; ++step) {
    INFO("ranks " << g.size() << ", step " << step);
    Generator gen(300 + static_cast<uint64_t>(step) * 10 + static_cast<uint64_t>(g.rank()));
    const Tensor x = randn({2, 3, 9, 9}, TensorOptions(DType::Float64), gen).contiguous(MemoryFormat::ChannelsLast);
    int64_t kept[2] = {0, 0};  // bytes in live tensors after backward, against before forward
    for (int k = 0; k < 2; ++k) {
      nn::Sequential& m = k == 0 ? *plain : *viewed;
      for (Tensor p : m.parameters()) p.set_grad(Tensor());
      const int64_t before = cpu_cache_stats().allocated_bytes;
      sum(pow(m(x), Scalar(2.0))).backward();
      kept[k] = cpu_cache_stats().allocated_bytes - before;
    }
    const TensorList pp = plain->parameters(), pv = viewed->parameters();
    for (size_t i = 0; i < pp.size(); ++i) {
      CHECK(pv[i].grad().strides() == pv[i].strides());  // the weight's layout, channels-last included
      // The same average within rounding: Open MPI may cut the buffer among the ranks by position,
      // and a channels-last weight's elements lie in another order in the view's bucket.
      const double scale = 1.0 + max(abs(pp[i].grad())).item<double>();
      CHECK(max(abs(pv[i].grad() - pp[i].grad())).item<double>() <= 1e-13 * scale);
    }
    CHECK(gradient_storages(*viewed, viewed_ddp) == 1);
    CHECK(shared_at_first == 1);
    if (step > 0) {  // the plain DDP's buckets exist from the first step on
      CHECK(kept[0] >= gradient_bytes);     // the gradients, beside the buckets
      CHECK(kept[1] < gradient_bytes / 2);  // the gradients are the buckets
    }
  }
}

TEST_CASE("ddp: comm_dtype sends the gradients in another dtype, at its precision", "[ddp]") {
  ProcessGroup& g = world();
  auto reference = make_model(2500);
  auto [x, y] = global_batch(40);
  mse_loss((*reference)(x), y).backward();
  const TensorList ref = reference->parameters();
  // The largest difference from the whole batch's gradient, relative to the gradient's largest value.
  auto relative_error = [&](nn::Module& m, double scale) {
    const TensorList got = m.parameters();
    double err = 0, top = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      REQUIRE(got[i].grad().dtype() == DType::Float64);  // back in the parameters' dtype
      err = test::worse(err, max(abs(got[i].grad() - ref[i].grad() * scale)).item<double>());
      top = std::max(top, max(abs(ref[i].grad() * scale)).item<double>());
    }
    return err / top;
  };
  SECTION("float32 and bfloat16 on the wire: the float64 gradients come back rounded to them") {
    for (const DType wire : {DType::Float32, DType::BFloat16}) {
      INFO("ranks " << g.size() << ", comm_dtype " << dtype_name(wire));
      auto local = make_model(2500);
      DDPOptions o;
      o.bucket_bytes = 200;  // several buckets
      o.comm_dtype = wire;
      DistributedDataParallel ddp(local, g, o);
      mse_loss((*local)(share(x, g)), share(y, g)).backward();
      const double err = relative_error(*local, 1.0);
      // The conversion rounds (so some difference shows even at one rank), and each rank's sum
      // rounds again: a few units of the dtype's precision, 2^-24 or 2^-8.
      if (wire == DType::Float32) {
        CHECK(err > 0.0);
        CHECK(err < 1e-6);
      } else {
        CHECK(err > 1e-5);
        CHECK(err < 1.0 / 64);
      }
    }
  }
  SECTION("float16: the buckets are divided before they are summed, so the sum stays in range") {
    // Every rank backpropagates the whole batch, scaled so that the largest gradient is 50000: the
    // average is each rank's own, within float16's range (65504), and the sum of two ranks' is not.
    double top = 0;
    for (const Tensor& p : ref) top = std::max(top, max(abs(p.grad())).item<double>());
    const double scale = 50000.0 / top;
    auto local = make_model(2500);
    DDPOptions o;
    o.comm_dtype = DType::Float16;
    DistributedDataParallel ddp(local, g, o);
    (mse_loss((*local)(x), y) * scale).backward();
    for (const Tensor& p : local->parameters()) CHECK(std::isfinite(max(abs(p.grad())).item<double>()));
    CHECK(relative_error(*local, scale) < 1.0 / 256);
  }
  SECTION("refused: a dtype that is not floating, and another dtype than the parameters' with bucket views") {
    auto local = make_model(2500);
    DDPOptions o;
    o.comm_dtype = DType::Int32;
    CHECK_THROWS_WITH(DistributedDataParallel(local, g, o),
                      Catch::Contains("comm_dtype") && Catch::Contains("int32"));
    o.comm_dtype = DType::BFloat16;
    o.gradient_as_bucket_view = true;
    CHECK_THROWS_WITH(DistributedDataParallel(local, g, o), Catch::Contains("gradient_as_bucket_view") &&
                                                                Catch::Contains("bfloat16") &&
                                                                Catch::Contains("'0.weight' is float64"));
    o.comm_dtype = DType::Float64;  // the parameters' own: views stay possible
    CHECK_NOTHROW(DistributedDataParallel(local, g, o));
  }
}

TEST_CASE("ddp: a parameter without a gradient is refused by name, or with find_unused_parameters zero where "
          "another rank has one and none where no rank has",
          "[ddp]") {
  ProcessGroup& g = world();
  auto model = std::make_shared<nn::Sequential>();
  auto used = std::make_shared<nn::Linear>(4, 2);
  auto unused = std::make_shared<nn::Linear>(4, 2);
  model->push_back(used);
  model->push_back(unused);
  Tensor x = ones({3, 4});
  {
    DistributedDataParallel ddp(model, g);
    CHECK_THROWS_WITH(sum((*used)(x)).backward(), Catch::Contains("parameter '1.weight' got no gradient"));
  }
  for (const bool as_views : {false, true}) {
    INFO("gradient_as_bucket_view " << as_views);
    for (auto& p : model->parameters()) p.set_grad(Tensor());
    DDPOptions o;
    o.find_unused_parameters = true;
    o.gradient_as_bucket_view = as_views;
    DistributedDataParallel ddp(model, g, o);
    sum((*used)(x)).backward();
    // Unused on every rank: no gradient, as in one process (an optimizer then skips it).
    CHECK_FALSE(unused->parameters()[0].grad().defined());
    CHECK_FALSE(unused->parameters()[1].grad().defined());
    // The used weight's gradient is the same on every rank (every rank computed the same one).
    Tensor w = used->parameters()[0].grad().clone();
    g.broadcast(w, 0)->wait();
    CHECK(max(abs(w - used->parameters()[0].grad())).item<float>() == 0.0f);
    // Used on rank 0 only: every rank gets the average, rank 0's gradient over the ranks (zeros elsewhere).
    for (auto& p : model->parameters()) p.set_grad(Tensor());
    Tensor loss = sum((*used)(x));
    if (g.rank() == 0) loss = loss + 2.0 * sum((*unused)(x));
    loss.backward();
    REQUIRE(unused->parameters()[0].grad().defined());
    const double expected = 2.0 * 3.0 / g.size();  // d(2 * sum(x W^T + b))/dW: 2 x 3 rows of ones, averaged
    CHECK(max(abs(unused->parameters()[0].grad() - expected)).item<double>() < 1e-6);
    // A step of AdamW with weight decay after a pass where the layer is unused everywhere leaves it
    // where it is, as one process's AdamW does (it skips parameters without a gradient).
    for (auto& p : model->parameters()) p.set_grad(Tensor());
    sum((*used)(x)).backward();
    const Tensor before = unused->parameters()[0].detach().clone();
    nn::optim::AdamW adamw(model->parameters(), 0.1, {0.9, 0.999}, 1e-8, /*weight_decay=*/0.5);
    adamw.step();
    CHECK(max(abs(unused->parameters()[0].detach() - before)).item<float>() == 0.0f);
  }
  CHECK_THROWS_AS(DistributedDataParallel(nullptr, g), Error);
  DDPOptions bad;
  bad.bucket_bytes = 0;
  CHECK_THROWS_AS(DistributedDataParallel(model, g, bad), Error);
}

TEST_CASE("zero-1 and zero-2: sharded AdamW equals DDP's AdamW, with 1/N of the optimizer state per rank",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  ZeroOptions small;  // every parameter a bucket of its own
  small.bucket_bytes = 100;
  ZeroOptions at_step = small;
  at_step.overlap = false;
  for (int stage : {1, 2}) {
    for (ZeroOptions o : {ZeroOptions{}, small, at_step}) {
      o.stage = stage;
      INFO("ranks " << g.size() << ", stage " << stage << ", bucket_bytes " << o.bucket_bytes << ", overlap "
                    << o.overlap);
      auto ddp_model = make_model(31);
      // ZeRO sets rank 0's weights everywhere.
      auto zero_model = make_model(31 + static_cast<uint64_t>(g.rank()));
      DistributedDataParallel ddp(ddp_model, g);
      nn::optim::AdamW ddp_opt(nn::optim::decay_groups(ddp_model->named_parameters(), 1e-2, 0.1));
      ZeroRedundancyOptimizer zero(nn::optim::decay_groups(zero_model->named_parameters(), 1e-2, 0.1), g, make_adamw,
                                   o);
      CHECK(zero.num_buckets() == (o.bucket_bytes == 100 ? 4U : 2U));  // one per group, or one per parameter
      CHECK(max_param_diff(*ddp_model, *zero_model) == 0.0);
      for (int64_t step = 0; step < 4; ++step) {
        auto [x, y] = global_batch(20 + step);
        ddp_opt.zero_grad();
        mse_loss((*ddp_model)(share(x, g)), share(y, g)).backward();
        ddp_opt.step();
        zero.zero_grad();
        mse_loss((*zero_model)(share(x, g)), share(y, g)).backward();
        // With the overlap, backward has reduced every bucket; without it, the step will.
        CHECK(zero.reductions() == (o.overlap ? static_cast<int64_t>(zero.num_buckets()) : 0));
        // Stage 2 releases the gradients it has reduced; stage 1 keeps them.
        CHECK(gradients_held(*zero_model) == (stage == 1 || !o.overlap ? 4 : 0));
        zero.step();
        CHECK(zero.reductions() == 0);
        CHECK(gradients_held(*zero_model) == (stage == 1 ? 4 : 0));
      }
      CHECK(max_param_diff(*ddp_model, *zero_model) < 1e-12);
      // Optimizer memory: the moments of this rank's shards only (besides one step count each).
      int64_t full = 0, local = 0;
      for (const auto& [name, t] : ddp_opt.state_dict()) {
        if (name.rfind("state.", 0) == 0 && !name.ends_with(".step")) full += t.numel();
      }
      for (const auto& [name, t] : zero.local().state_dict()) {
        if (name.rfind("state.", 0) == 0 && !name.ends_with(".step")) local += t.numel();
      }
      const int64_t params = zero_model->num_parameters();
      CHECK(full == 2 * params);
      int64_t shards = 0;
      for (int64_t s : zero.shard_numel()) shards += s;
      CHECK(local == 2 * shards);
      // Each bucket pads to a multiple of the world size.
      CHECK(shards * g.size() < params + static_cast<int64_t>(zero.num_buckets()) * g.size());
    }
  }
}

TEST_CASE("zero-2: sharded Adam with amsgrad equals DDP's, its running maximum sharded and saved as unsharded",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  INFO("ranks " << g.size());
  auto ddp_model = make_model(41);
  auto zero_model = make_model(41);
  DistributedDataParallel ddp(ddp_model, g);
  auto ddp_opt = make_adam_amsgrad(nn::optim::decay_groups(ddp_model->named_parameters(), 1e-2, 0.1));
  ZeroOptions o;
  o.stage = 2;
  o.bucket_bytes = 100;  // a bucket per parameter
  ZeroRedundancyOptimizer zero(nn::optim::decay_groups(zero_model->named_parameters(), 1e-2, 0.1), g, make_adam_amsgrad,
                               o);
  step_both(*ddp_model, *ddp_opt, *zero_model, zero, g, 4, 60);
  CHECK(max_param_diff(*ddp_model, *zero_model) < 1e-12);
  // Three state tensors per element of this rank's shards; the gathered state is the unsharded one.
  int64_t local = 0, shards = 0;
  for (const auto& [name, t] : zero.local().state_dict()) {
    if (name.rfind("state.", 0) == 0 && !name.ends_with(".step")) local += t.numel();
  }
  for (int64_t s : zero.shard_numel()) shards += s;
  CHECK(local == 3 * shards);
  const auto want = ddp_opt->state_dict(), got = zero.state_dict();
  CHECK(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    if (name.ends_with("max_exp_avg_sq")) CHECK(max(abs(got.at(name) - t)).item<double>() < 1e-12);
  }
}

TEST_CASE(
    "zero-2: the composed optimizers (RMSprop, Adagrad, Adamax, RAdam, NAdam, Adadelta, Rprop, ASGD) sharded "
    "equal DDP's, their state too",
    "[ddp][zero]") {
  ProcessGroup& g = world();
  using Groups = std::vector<nn::optim::ParamGroup>;
  const std::vector<std::pair<const char*, ZeroRedundancyOptimizer::Factory>> makers = {
      {"RMSprop, centered, momentum",
       [](Groups groups) { return std::make_unique<nn::optim::RMSprop>(std::move(groups), 0.9, 1e-8, 0.5, true); }},
      {"Adagrad", [](Groups groups) { return std::make_unique<nn::optim::Adagrad>(std::move(groups), 0.1, 0.25); }},
      {"Adamax", [](Groups groups) { return std::make_unique<nn::optim::Adamax>(std::move(groups)); }},
      // beta2 0.9: the rectified update starts at step 6 of the 7.
      {"RAdam",
       [](Groups groups) {
         return std::make_unique<nn::optim::RAdam>(std::move(groups), std::make_pair(0.9, 0.9), 1e-8, true);
       }},
      // NAdam's and ASGD's scalar states (mu_product; eta and mu) are one per shard, given to every
      // parameter of the group in the gathered state.
      {"NAdam, decoupled",
       [](Groups groups) {
         return std::make_unique<nn::optim::NAdam>(std::move(groups), std::make_pair(0.9, 0.99), 1e-8, 0.4, true);
       }},
      {"Adadelta", [](Groups groups) { return std::make_unique<nn::optim::Adadelta>(std::move(groups)); }},
      {"Rprop",
       [](Groups groups) {
         for (auto& group : groups) group.weight_decay = 0.0;  // Rprop has none
         return std::make_unique<nn::optim::Rprop>(std::move(groups));
       }},
      // t0 3: the average starts within the 7 steps.
      {"ASGD", [](Groups groups) { return std::make_unique<nn::optim::ASGD>(std::move(groups), 0.1, 0.75, 3.0); }}};
  for (const auto& [name, make] : makers) {
    INFO("ranks " << g.size() << ", " << name);
    auto ddp_model = make_model(43);
    auto zero_model = make_model(43);
    DistributedDataParallel ddp(ddp_model, g);
    auto ddp_opt = make(nn::optim::decay_groups(ddp_model->named_parameters(), 1e-2, 0.1));
    ZeroOptions o;
    o.stage = 2;
    o.bucket_bytes = 100;  // a bucket per parameter
    ZeroRedundancyOptimizer zero(nn::optim::decay_groups(zero_model->named_parameters(), 1e-2, 0.1), g, make, o);
    step_both(*ddp_model, *ddp_opt, *zero_model, zero, g, 7, 80);
    CHECK(max_param_diff(*ddp_model, *zero_model) < 1e-12);
    const auto want = ddp_opt->state_dict(), got = zero.state_dict();
    CHECK(got.size() == want.size());
    for (const auto& [key, t] : want) {
      INFO(key);
      REQUIRE(got.count(key) == 1);
      REQUIRE(got.at(key).sizes() == t.sizes());
      if (key.rfind("state.", 0) == 0) CHECK(max(abs(got.at(key) - t)).item<double>() < 1e-12);
    }
    // The gathered state loads back: another sharded optimizer resumes from it.
    ZeroRedundancyOptimizer again(nn::optim::decay_groups(zero_model->named_parameters(), 1e-2, 0.1), g, make, o);
    again.load_state_dict(got);
    const auto reloaded = again.state_dict();
    for (const auto& [key, t] : got) {
      INFO(key);
      CHECK(kiln::test::bitwise_equal(reloaded.at(key), t));
    }
    if (got.count("state.1.mu_product")) {  // parameters 0 and 1 are group 0's: their scalars must agree
      auto bad = got;
      bad["state.1.mu_product"] = full({}, 0.5, TensorOptions(DType::Float64));
      CHECK_THROWS_WITH(again.load_state_dict(bad), Catch::Contains("state.1.mu_product") &&
                                                        Catch::Contains("same group (0) have mu_product 0.5 and"));
    }
  }
}

TEST_CASE("zero-1: a bucket's reduce-scatter starts during backward, in the order the first backward completed them",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  INFO("ranks " << g.size() << ", rank " << g.rank());
  auto reference = make_model(3000);
  auto local = make_model(3000);
  const TensorList p = local->parameters();  // w0, b0, w1, b1: backward accumulates w0 or b0 last
  // Groups whose own order is not backward's: the first order (each group from its last parameter,
  // group by group) is w0, b1, b0, w1, while backward completes w1 and b1 first and w0 and b0 last,
  // so the first backward issues at most two buckets before the last gradient comes. The second
  // issues in the order the first completed the buckets: all but the last one's by then.
  Arrivals arrivals(p);
  ZeroOptions o;
  o.bucket_bytes = 100;  // a bucket per parameter
  ZeroRedundancyOptimizer zero({lr_group({p[3], p[0]}, 0.1), lr_group({p[2], p[1]}, 0.1)}, g, make_sgd, o);
  arrivals.reductions = [&] { return zero.reductions(); };
  REQUIRE(zero.num_buckets() == 4);
  nn::optim::SGD ref_opt(reference->parameters(), 0.1, 0.9);
  std::vector<int64_t> at_last;  // per backward: reductions issued before the last gradient came
  for (int64_t step = 0; step < 3; ++step) {
    auto [x, y] = global_batch(120 + step);
    ref_opt.zero_grad();
    mse_loss((*reference)(x), y).backward();
    ref_opt.step();
    arrivals.fired.clear();
    zero.zero_grad();
    mse_loss((*local)(share(x, g)), share(y, g)).backward();
    REQUIRE(arrivals.fired.size() == 4);
    CHECK((arrivals.fired.back() == 0 || arrivals.fired.back() == 1));  // the first layer's gradients come last
    at_last.push_back(arrivals.at_last);
    CHECK(zero.reductions() == 4);
    zero.step();
  }
  CHECK(at_last[0] < 3);   // the first order held buckets back behind w0's
  CHECK(at_last[1] == 3);  // then every bucket but the last one's went as soon as it was complete
  CHECK(at_last[2] == 3);
  CHECK(max_param_diff(*reference, *local) < 1e-12);
}

TEST_CASE("zero-2: a bucket's gradients are released as its reduce-scatter is issued, so no full gradient is left",
          "[ddp][zero]") {
  // Stage 1 beside it: the same training, holding every gradient and a flat buffer of the same size.
  ProcessGroup& g = world();
  INFO("ranks " << g.size() << ", rank " << g.rank());
  auto reference = make_model(3100);
  nn::optim::SGD ref_opt(reference->parameters(), 0.1, 0.9);
  const int64_t gradient_bytes = reference->num_parameters() * 8;  // float64
  int64_t resident[3] = {0, 0, 0};  // per stage: bytes in live tensors after the last step
  for (int stage : {1, 2}) {
    auto local = make_model(3100);
    Arrivals arrivals(local->parameters());
    ZeroOptions o;
    o.bucket_bytes = 100;  // a bucket per parameter
    o.stage = stage;
    ZeroRedundancyOptimizer zero({lr_group(local->parameters(), 0.1)}, g, make_sgd, o);
    arrivals.reductions = [&] { return zero.reductions(); };
    arrivals.held = [&] { return static_cast<int64_t>(gradients_held(*local)); };
    for (int64_t step = 0; step < 3; ++step) {
      auto [x, y] = global_batch(130 + step);
      if (stage == 1) {
        ref_opt.zero_grad();
        mse_loss((*reference)(x), y).backward();
        ref_opt.step();
      }
      zero.zero_grad();
      const Tensor xs = share(x, g), ys = share(y, g);
      const int64_t before = cpu_cache_stats().allocated_bytes;
      mse_loss((*local)(xs), ys).backward();  // the graph and its activations are gone after it
      const int64_t kept = cpu_cache_stats().allocated_bytes - before;
      // When the last gradient came, stage 2 held only the gradients of the buckets not issued yet
      // (the last one's included): every issued bucket had given its own up.
      CHECK(arrivals.held_at_last == (stage == 1 ? 4 : 4 - arrivals.at_last));
      if (step > 0) CHECK(arrivals.at_last == 3);  // so at most one gradient was held then
      // After backward: stage 1 holds every parameter's gradient, stage 2 none.
      CHECK(gradients_held(*local) == (stage == 1 ? 4 : 0));
      if (stage == 1) CHECK(kept >= gradient_bytes);
      if (stage == 2) CHECK(kept < gradient_bytes / 2);
      zero.step();
    }
    resident[stage] = cpu_cache_stats().allocated_bytes;
    CHECK(max_param_diff(*reference, *local) < 1e-12);
  }
  // Between steps stage 2 holds neither the gradients nor the buckets' flat buffers.
  CHECK(resident[1] - resident[2] >= 2 * gradient_bytes);
}

TEST_CASE("zero-2: the step's all-gathers hold a few buckets' buffers at a time, not the model's", "[ddp][zero]") {
  ProcessGroup& g = world();
  INFO("ranks " << g.size() << ", rank " << g.rank());
  // Six equal layers, a bucket per parameter: twelve all-gathers in the step.
  auto make = [] {
    manual_seed(3200);
    auto m = std::make_shared<nn::Sequential>();
    for (int i = 0; i < 6; ++i) m->push_back(std::make_shared<nn::Linear>(8, 8));
    m->to(DType::Float64);
    return m;
  };
  auto reference = make();
  auto local = make();
  nn::optim::SGD ref_opt(reference->parameters(), 0.1);
  ZeroOptions o;
  o.bucket_bytes = 100;
  o.stage = 2;
  ZeroRedundancyOptimizer zero({lr_group(local->parameters(), 0.1)}, g, make_sgd_plain, o);
  REQUIRE(zero.num_buckets() == 12);
  const int64_t model_bytes = reference->num_parameters() * 8;
  for (int64_t step = 0; step < 3; ++step) {
    Generator gen(500 + static_cast<uint64_t>(step));
    const Tensor x = randn({kGlobalBatch, 8}, TensorOptions(DType::Float64), gen);
    ref_opt.zero_grad();
    mean(pow((*reference)(x), Scalar(2.0))).backward();  // means: DDP's average of the shares' is the whole's
    ref_opt.step();
    zero.zero_grad();
    mean(pow((*local)(share(x, g)), Scalar(2.0))).backward();
    const int64_t before = cpu_cache_stats().allocated_bytes;
    reset_cpu_peak_memory();
    zero.step();
    // Two 8 x 8 weights' buffers at most (plain SGD keeps and makes nothing of the model's size);
    // all the buffers at once would be the model's bytes.
    CHECK(cpu_cache_stats().peak_allocated_bytes - before <= 2 * 64 * 8 + 1024);
    CHECK(cpu_cache_stats().peak_allocated_bytes - before < model_bytes / 2);
  }
  CHECK(max_param_diff(*reference, *local) < 1e-12);
}

TEST_CASE("zero-1 and zero-2: no_sync accumulates without reducing; the backward that reduces takes the sum",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  // Two micro-batches per step: reduced after each backward, only after the second (no_sync), or
  // after the first only and then accumulated under no_sync, which leaves the step to reduce again.
  // Stage 1 reduces the whole sum each time; stage 2 released what it reduced, so it reduces what
  // was added since and sums the reductions.
  for (int stage : {1, 2}) {
    for (int pattern = 0; pattern < 3; ++pattern) {
      INFO("ranks " << g.size() << ", stage " << stage << ", pattern " << pattern);
      auto reference = make_model(4000);
      auto local = make_model(4000);
      nn::optim::SGD ref_opt(reference->parameters(), 0.1, 0.9);
      ZeroOptions o;
      o.stage = stage;
      ZeroRedundancyOptimizer zero({lr_group(local->parameters(), 0.1)}, g, make_sgd, o);
      for (int64_t step = 0; step < 3; ++step) {
        ref_opt.zero_grad();
        zero.zero_grad();
        int64_t reducing = 0;  // backward passes that reduced in this step
        for (int64_t micro = 0; micro < 2; ++micro) {
          auto [x, y] = global_batch(140 + 2 * step + micro);
          mse_loss((*reference)(x), y).backward();
          std::optional<NoSync> quiet;
          if ((pattern == 1 && micro == 0) || (pattern == 2 && micro == 1)) quiet.emplace(zero.no_sync());
          mse_loss((*local)(share(x, g)), share(y, g)).backward();
          reducing += quiet ? 0 : 1;
          // One bucket: stage 1 counts the reduction the step can use, stage 2 all it will sum.
          CHECK(zero.reductions() == (stage == 1 ? (quiet ? 0 : 1) : reducing));
          CHECK(gradients_held(*local) == (stage == 1 || quiet ? 4 : 0));
        }
        ref_opt.step();
        zero.step();
      }
      CHECK(max_param_diff(*reference, *local) < 1e-12);
    }
  }
}

TEST_CASE("zero-1 and zero-2: comm_dtype reduce-scatters the gradients in another dtype, at its precision",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  for (const int stage : {1, 2}) {
    for (const DType wire : {DType::Float32, DType::BFloat16, DType::Float16}) {
      INFO("ranks " << g.size() << ", stage " << stage << ", comm_dtype " << dtype_name(wire));
      auto reference = make_model(2600);
      auto local = make_model(2600);
      ZeroOptions o;
      o.bucket_bytes = 200;  // several buckets
      o.stage = stage;
      o.comm_dtype = wire;
      ZeroRedundancyOptimizer zero({lr_group(local->parameters(), 1.0)}, g, make_sgd_plain, o);
      nn::optim::SGD ref_opt(reference->parameters(), 1.0);
      // Two micro-batches that both reduce: stage 2 adds the second reduction to the first in the
      // shards, converting each; stage 1 reduces the whole sum again.
      for (int64_t micro = 0; micro < 2; ++micro) {
        auto [x, y] = global_batch(170 + micro);
        mse_loss((*reference)(x), y).backward();
        mse_loss((*local)(share(x, g)), share(y, g)).backward();
      }
      TensorList before;
      for (const Tensor& p : reference->parameters()) before.push_back(p.detach().clone());
      ref_opt.step();
      zero.step();
      // Plain SGD with lr 1: the update is the gradient, in float64 again after the wire's rounding.
      double err = 0, top = 0;
      const TensorList want = reference->parameters(), got = local->parameters();
      for (size_t i = 0; i < want.size(); ++i) {
        err = test::worse(err, max(abs(got[i] - want[i])).item<double>());
        top = std::max(top, max(abs(before[i] - want[i])).item<double>());
      }
      const double relative = err / top;
      const double below = wire == DType::Float32 ? 1e-6 : wire == DType::Float16 ? 1.0 / 256 : 1.0 / 64;
      CHECK(relative > (wire == DType::Float32 ? 0.0 : 1e-6));  // rounded to the wire's precision
      CHECK(relative < below);
    }
  }
  // float16: divided before the sum, as DDP's. Every rank backpropagates the whole batch, scaled so
  // that the largest gradient is 50000: each rank's and their average are in float16's range, the
  // sum of two ranks' is not. The norm of the reduced shards is finite only if every element is.
  for (const int stage : {1, 2}) {
    INFO("ranks " << g.size() << ", stage " << stage << ", float16 near its range");
    auto reference = make_model(2600);
    auto local = make_model(2600);
    auto [x, y] = global_batch(172);
    mse_loss((*reference)(x), y).backward();
    double top = 0;
    for (const Tensor& p : reference->parameters()) top = std::max(top, max(abs(p.grad())).item<double>());
    ZeroOptions o;
    o.stage = stage;
    o.comm_dtype = DType::Float16;
    ZeroRedundancyOptimizer zero({lr_group(local->parameters(), 1.0)}, g, make_sgd_plain, o);
    (mse_loss((*local)(x), y) * (50000.0 / top)).backward();
    CHECK(std::isfinite(zero.clip_grad_norm_(1e300).item<double>()));
  }
  // Stage 2 holds nothing of its reductions between steps in another dtype either: the bytes in live
  // tensors after a step are those of the same run in the parameters' own dtype.
  int64_t resident[2] = {0, 0};
  for (const bool wire : {false, true}) {
    auto local = make_model(2600);
    ZeroOptions o;
    o.stage = 2;
    if (wire) o.comm_dtype = DType::BFloat16;
    ZeroRedundancyOptimizer zero({lr_group(local->parameters(), 1.0)}, g, make_sgd_plain, o);
    auto [x, y] = global_batch(173);
    mse_loss((*local)(share(x, g)), share(y, g)).backward();
    zero.step();
    resident[wire ? 1 : 0] = cpu_cache_stats().allocated_bytes;
  }
  CHECK(resident[1] == resident[0]);
  auto local = make_model(2600);
  ZeroOptions o;
  o.comm_dtype = DType::Int64;
  CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group(local->parameters(), 1.0)}, g, make_sgd_plain, o),
                    Catch::Contains("comm_dtype") && Catch::Contains("int64"));
}

TEST_CASE("zero-1: state_dict is an unsharded optimizer's, and load_state_dict shards it again", "[ddp][zero]") {
  ProcessGroup& g = world();
  // The saving optimizer's buckets and the loading one's differ: one per group, one per parameter.
  const int64_t bucket_bytes = GENERATE(int64_t{25} << 20, int64_t{100});
  INFO("ranks " << g.size() << ", rank " << g.rank() << ", bucket_bytes " << bucket_bytes);
  auto make_zero = [&g](nn::Module& model, int64_t bytes) {
    ZeroOptions o;
    o.bucket_bytes = bytes;
    return std::make_unique<ZeroRedundancyOptimizer>(nn::optim::decay_groups(model.named_parameters(), 1e-2, 0.1), g,
                                                     make_adamw, o);
  };
  auto ddp_model = make_model(61);
  auto zero_model = make_model(61);
  DistributedDataParallel ddp(ddp_model, g);
  nn::optim::AdamW ddp_opt(nn::optim::decay_groups(ddp_model->named_parameters(), 1e-2, 0.1));
  auto zero = make_zero(*zero_model, bucket_bytes);
  auto train = [&](nn::Sequential& model, auto&& zero_grad, auto&& step, int64_t first, int64_t steps) {
    for (int64_t k = first; k < first + steps; ++k) {
      auto [x, y] = global_batch(100 + k);
      zero_grad();
      mse_loss(model(share(x, g)), share(y, g)).backward();
      step();
    }
  };
  CHECK(zero->state_dict().size() == ddp_opt.state_dict().size());  // before any step: no state either way
  train(*ddp_model, [&] { ddp_opt.zero_grad(); }, [&] { ddp_opt.step(); }, 0, 3);
  train(*zero_model, [&] { zero->zero_grad(); }, [&] { zero->step(); }, 0, 3);
  const auto want = ddp_opt.state_dict();
  const auto got = zero->state_dict();
  REQUIRE(got.size() == want.size());
  for (const auto& [key, t] : want) {
    INFO(key);
    REQUIRE(got.count(key) == 1);
    const Tensor& z = got.at(key);
    CHECK(z.sizes() == t.sizes());
    CHECK(z.dtype() == t.dtype());
    CHECK(max(abs(z.to(DType::Float64) - t.to(DType::Float64))).item<double>() < 1e-12);
  }
  // DDP's optimizer state into a fresh ZeRO, and DDP's weights into its model after it was built
  // (as a checkpoint loads them): both go on as one.
  auto resumed_model = make_model(62);
  auto resumed = make_zero(*resumed_model, bucket_bytes == 100 ? int64_t{25} << 20 : int64_t{100});
  resumed->load_state_dict(want);
  for (size_t i = 0; i < ddp_model->parameters().size(); ++i) {
    NoGradGuard no_grad;
    resumed_model->parameters()[i].copy_(ddp_model->parameters()[i]);
  }
  train(*ddp_model, [&] { ddp_opt.zero_grad(); }, [&] { ddp_opt.step(); }, 3, 2);
  train(*resumed_model, [&] { resumed->zero_grad(); }, [&] { resumed->step(); }, 3, 2);
  CHECK(max_param_diff(*ddp_model, *resumed_model) < 1e-12);
  CHECK(resumed->local().step_count() == 5);
  // Refusals name the key and change nothing.
  const auto before = resumed->state_dict();
  auto refused = [&](const std::string& key, const Tensor& value, const std::string& says) {
    auto bad = want;
    bad[key] = value;
    CHECK_THROWS_WITH(resumed->load_state_dict(bad), Catch::Contains(key) && Catch::Contains(says));
  };
  refused("state.0.exp_avg", zeros({2, 2}, TensorOptions(DType::Float64)), "expected");
  refused("state.0.exp_avg", want.at("state.0.exp_avg").to(DType::Float32), "float32");
  refused("state.99.exp_avg", zeros({1}, TensorOptions(DType::Float64)), "names parameter 99");
  refused("state.0.momentum_buffer", zeros_like(want.at("state.0.exp_avg")), "keeps no state");
  refused("group.7.lr", full({}, 0.1, TensorOptions(DType::Float64)), "unexpected key");
  // The whole groups' sizes travel with the state (the local optimizer's groups are one shard each).
  REQUIRE(want.count("group.0.params"));
  const auto groups = nn::optim::decay_groups(ddp_model->named_parameters(), 1e-2, 0.1);
  CHECK(want.at("group.0.params").item<int64_t>() == static_cast<int64_t>(groups[0].params.size()));
  CHECK(got.at("group.1.params").item<int64_t>() == static_cast<int64_t>(groups[1].params.size()));
  refused("group.0.params", full({}, 1.0, TensorOptions(DType::Int64)), "does not give group 0's size");
  refused("state.00.exp_avg", want.at("state.0.exp_avg"), "unexpected key");
  // Each parameter's step count: the same within a group, which a shard keeps one count for.
  CHECK(want.at("state.0.step").item<double>() == 3.0);
  CHECK(got.at("state.1.step").item<double>() == 3.0);
  refused("state.1.step", full({}, 2.0), "parameter 0 of the same group (0) have step counts 2 and 3");
  const auto after = resumed->state_dict();
  REQUIRE(after.size() == before.size());
  for (const auto& [key, t] : before) {
    INFO(key);
    CHECK(max(abs(after.at(key).to(DType::Float64) - t.to(DType::Float64))).item<double>() == 0.0);
  }
}

TEST_CASE("zero-1 and zero-2 with a GradScaler: an inf in one rank's shard skips the step on every rank",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  for (int stage : {1, 2}) {
    auto model = make_model(41);
    // The first element of the flat buffer lies in shard 0, which rank 0 alone checks. The poison is
    // put in as backward accumulates the gradient, before ZeRO's hook (registered later) reduces it.
    bool poison_next = false;
    if (g.rank() == 0) {
      model->parameters()[0].register_post_accumulate_grad_hook([&](Tensor& p) {
        if (poison_next) p.grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
      });
    }
    ZeroOptions o;
    o.stage = stage;
    ZeroRedundancyOptimizer zero({lr_group(model->parameters(), 1e-2)}, g, make_adamw, o);
    nn::amp::GradScaler scaler;
    auto step = [&](int64_t k, bool poison) {
      auto [x, y] = global_batch(40 + k);
      zero.zero_grad();
      poison_next = poison;
      scaler.scale(mse_loss((*model)(share(x, g)), share(y, g))).backward();
      zero.step(scaler);
      scaler.update();
    };
    auto snapshot = [&] {
      TensorList out;
      for (const Tensor& p : model->parameters()) out.push_back(p.detach().clone());
      return out;
    };
    step(0, false);
    CHECK(scaler.get_scale() == 65536.0);
    const TensorList before = snapshot();
    step(1, true);
    INFO("ranks " << g.size() << ", rank " << g.rank() << ", stage " << stage);
    CHECK(scaler.get_scale() == 32768.0);  // every rank backed off
    const TensorList after = snapshot();
    for (size_t i = 0; i < before.size(); ++i) CHECK(max(abs(after[i] - before[i])).item<double>() == 0.0);
    step(2, false);  // and every rank steps again
    const TensorList later = snapshot();
    CHECK(max(abs(later[0] - after[0])).item<double>() > 0.0);
  }
}

namespace {

// Rank 0's value of a 0-d tensor, on every rank.
double rank0_value(const Tensor& t, ProcessGroup& g) {
  Tensor c = t.detach().to(DType::Float64).clone();
  g.broadcast(c, 0)->wait();
  return c.item<double>();
}

}  // namespace

TEST_CASE("zero-1 and zero-2: clip_grad_norm_ clips by the norm of the whole gradient, as a clip after DDP does",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  // SGD with momentum, where the clip factor reaches the weights (Adam would divide most of it out).
  for (int stage : {1, 2}) {
    for (double norm_type : {2.0, 1.0, 3.0, double(INFINITY)}) {
      INFO("ranks " << g.size() << ", rank " << g.rank() << ", stage " << stage << ", norm_type " << norm_type);
      auto ddp_model = make_model(51);
      auto zero_model = make_model(51);
      auto unclipped_model = make_model(51);
      DistributedDataParallel ddp(ddp_model, g);
      nn::optim::SGD ddp_opt(ddp_model->parameters(), 0.2, 0.9);
      ZeroOptions per_parameter;  // several buckets: the shard holds a slice of each
      per_parameter.bucket_bytes = 100;
      per_parameter.stage = stage;
      ZeroRedundancyOptimizer zero({lr_group(zero_model->parameters(), 0.2)}, g, make_sgd, per_parameter);
      ZeroRedundancyOptimizer unclipped({lr_group(unclipped_model->parameters(), 0.2)}, g, make_sgd);
      bool clipped = false;
      for (int64_t step = 0; step < 4; ++step) {
        auto [x, y] = global_batch(60 + step);
        ddp_opt.zero_grad();
        mse_loss((*ddp_model)(share(x, g)), share(y, g)).backward();
        const double max_norm = 0.25;
        const double want = nn::optim::clip_grad_norm_(ddp_model->parameters(), max_norm, norm_type).item<double>();
        ddp_opt.step();
        zero.zero_grad();
        mse_loss((*zero_model)(share(x, g)), share(y, g)).backward();
        const Tensor norm = zero.clip_grad_norm_(max_norm, norm_type);
        zero.step();
        unclipped.zero_grad();
        mse_loss((*unclipped_model)(share(x, g)), share(y, g)).backward();
        unclipped.step();
        CHECK(norm.dim() == 0);
        CHECK(norm.dtype() == DType::Float64);  // of float64 gradients, as clip_grad_norm_'s
        const double got = norm.item<double>();
        CHECK(std::abs(got - want) <= 1e-12 * want);
        CHECK(rank0_value(norm, g) == got);  // the same total on every rank
        clipped = clipped || want > max_norm;
      }
      CHECK(clipped);  // the clip did act on these gradients
      // The clip factor is float64 either way, from norms that differ in their last bits.
      CHECK(max_param_diff(*ddp_model, *zero_model) < 1e-7);
      CHECK(max_param_diff(*unclipped_model, *zero_model) > 1e-3);
    }
  }
  auto model = make_model(51);
  ZeroRedundancyOptimizer zero({lr_group(model->parameters(), 0.2)}, g, make_sgd);
  CHECK_THROWS_WITH(zero.clip_grad_norm_(-1.0), Catch::Contains("clip_grad_norm_") && Catch::Contains("max_norm"));
  CHECK_THROWS_WITH(zero.clip_grad_norm_(1.0, 0.0), Catch::Contains("norm_type"));
  CHECK_THROWS_WITH(zero.clip_grad_norm_(NAN), Catch::Contains("max_norm"));
  ZeroOptions no_room;
  no_room.bucket_bytes = 0;
  CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group(model->parameters(), 0.2)}, g, make_sgd, no_room),
                    Catch::Contains("ZeroRedundancyOptimizer") && Catch::Contains("bucket_bytes") &&
                        Catch::Contains("got 0"));
  ZeroOptions stage3;
  stage3.stage = 3;
  CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group(model->parameters(), 0.2)}, g, make_sgd, stage3),
                    Catch::Contains("ZeroRedundancyOptimizer") && Catch::Contains("stage") && Catch::Contains("got 3"));
}

TEST_CASE("zero-1: clip_grad_norm_ with a GradScaler unscales the shards first, and an inf skips every rank's step",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  auto plain_model = make_model(71);
  auto scaled_model = make_model(71);
  ZeroOptions stage2;  // the plain run in stage 2: its clip of released gradients is checked against stage 1's
  stage2.stage = 2;
  ZeroRedundancyOptimizer plain({lr_group(plain_model->parameters(), 0.2)}, g, make_sgd, stage2);
  ZeroOptions at_step;  // the reduce-scatter in the clip: a gradient set by hand after backward counts
  at_step.overlap = false;
  ZeroRedundancyOptimizer scaled({lr_group(scaled_model->parameters(), 0.2)}, g, make_sgd, at_step);
  nn::amp::GradScaler scaler;
  INFO("ranks " << g.size() << ", rank " << g.rank());
  for (int64_t step = 0; step < 3; ++step) {
    auto [x, y] = global_batch(80 + step);
    plain.zero_grad();
    mse_loss((*plain_model)(share(x, g)), share(y, g)).backward();
    const double want = plain.clip_grad_norm_(0.25).item<double>();
    plain.step();
    scaled.zero_grad();
    scaler.scale(mse_loss((*scaled_model)(share(x, g)), share(y, g))).backward();
    const double got = scaled.clip_grad_norm_(0.25, 2.0, &scaler).item<double>();
    scaled.step(scaler);
    scaler.update();
    CHECK(std::abs(got - want) <= 1e-6 * want);  // the norm of the unscaled gradients
  }
  CHECK(max_param_diff(*plain_model, *scaled_model) < 1e-7);
  // An inf in rank 0's shard alone: the total norm is inf on every rank, and every rank skips.
  TensorList before;
  for (const Tensor& p : scaled_model->parameters()) before.push_back(p.detach().clone());
  auto [x, y] = global_batch(90);
  scaled.zero_grad();
  scaler.scale(mse_loss((*scaled_model)(share(x, g)), share(y, g))).backward();
  if (g.rank() == 0) scaled_model->parameters()[0].grad().view({-1}).narrow(0, 0, 1).fill_(INFINITY);
  const Tensor norm = scaled.clip_grad_norm_(0.25, 2.0, &scaler);
  CHECK(std::isinf(norm.item<double>()));
  scaled.step(scaler);
  scaler.update();
  CHECK(scaler.get_scale() == 32768.0);
  const TensorList after = scaled_model->parameters();
  for (size_t i = 0; i < before.size(); ++i) CHECK(max(abs(after[i] - before[i])).item<double>() == 0.0);
}

namespace {

// A conv and a BatchNorm2d over its channels, or (one_d) a linear layer and a BatchNorm1d over its
// features, then a ReLU and a linear head; inputs [N, 2, 5, 5].
std::shared_ptr<nn::Sequential> make_bn_model(uint64_t seed, bool one_d = false) {
  manual_seed(seed);
  using Layers = std::initializer_list<std::shared_ptr<nn::UnaryModule>>;
  auto m =
      one_d
          ? std::make_shared<nn::Sequential>(Layers{
                std::make_shared<nn::Flatten>(1), std::make_shared<nn::Linear>(2 * 5 * 5, 8, false),
                std::make_shared<nn::BatchNorm1d>(8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 3)})
          : std::make_shared<nn::Sequential>(
                Layers{std::make_shared<nn::Conv2d>(2, 4, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, false),
                       std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Flatten>(1), std::make_shared<nn::Linear>(4 * 5 * 5, 3)});
  m->to(DType::Float64);
  return m;
}

// Trains `model` for 3 SGD steps on global batches (shared by the ranks when `group`), with the
// batch norm's input shifted and scaled differently per row so that shares' statistics differ.
void train_bn(nn::Module& model, ProcessGroup* group) {
  nn::optim::SGD opt(model.parameters(), 0.05);
  for (int64_t step = 0; step < 3; ++step) {
    Generator gen(300 + static_cast<uint64_t>(step));
    Tensor x = randn({kGlobalBatch, 2, 5, 5}, TensorOptions(DType::Float64), gen) *
                   arange(1, kGlobalBatch + 1, 1, TensorOptions(DType::Float64)).view({kGlobalBatch, 1, 1, 1}) +
               arange(0, kGlobalBatch, 1, TensorOptions(DType::Float64)).view({kGlobalBatch, 1, 1, 1});
    Tensor y = randn({kGlobalBatch, 3}, TensorOptions(DType::Float64), gen);
    if (group != nullptr) {
      x = share(x, *group);
      y = share(y, *group);
    }
    opt.zero_grad();
    mse_loss(static_cast<nn::Sequential&>(model)(x), y).backward();
    opt.step();
  }
}

double max_state_diff(nn::Module& a, nn::Module& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  double d = 0;
  for (const auto& [name, t] : sa) {
    if (t.dtype() == DType::Int64) {
      d = std::max(d, t.to_vector<int64_t>() == sb.at(name).to_vector<int64_t>() ? 0.0 : 1.0);
    } else {
      d = std::max(d, max(abs(t - sb.at(name))).item<double>());
    }
  }
  return d;
}

}  // namespace

TEST_CASE("sync batch norm: DDP on shares of the batch equals one process on all of it", "[ddp][syncbn]") {
  ProcessGroup& g = world();
  for (const bool one_d : {false, true}) {
    INFO("ranks " << g.size() << (one_d ? ", BatchNorm1d" : ", BatchNorm2d"));
    auto reference = make_bn_model(60, one_d);
    train_bn(*reference, nullptr);

    auto synced = make_bn_model(60, one_d);
    CHECK(convert_sync_batchnorm(*synced, g) == 1);
    DistributedDataParallel ddp(synced, g);
    train_bn(*synced, &g);
    // Weights, biases, running mean and variance, and batches tracked.
    CHECK(max_state_diff(*reference, *synced) < 1e-12);

    if (g.size() > 1) {  // without synchronization the shares' statistics differ: the check above can fail
      auto plain = make_bn_model(60, one_d);
      DistributedDataParallel plain_ddp(plain, g);
      train_bn(*plain, &g);
      CHECK(max_state_diff(*reference, *plain) > 1e-6);
    }
    // Evaluation uses the running statistics: no communication, the same outputs as the reference.
    synced->eval();
    reference->eval();
    Tensor probe = randn({3, 2, 5, 5}, TensorOptions(DType::Float64), Generator(7));
    CHECK(max(abs((*synced)(probe) - (*reference)(probe))).item<double>() < 1e-12);
  }
}

// The running statistics do not feed training's forward (batch norm normalizes with the batch's),
// so rank 0's are the same with the broadcast and without it: every rank must end with those.
TEST_CASE("ddp: broadcast_buffers gives every rank rank 0's running statistics after each backward", "[ddp]") {
  ProcessGroup& g = world();
  INFO("ranks " << g.size());
  auto synced = make_bn_model(60);
  DistributedDataParallel ddp(synced, g);
  train_bn(*synced, &g);
  auto own = make_bn_model(60);
  DDPOptions off;
  off.broadcast_buffers = false;
  DistributedDataParallel own_ddp(own, g, off);
  train_bn(*own, &g);
  for (const auto& [name, b] : own->named_buffers()) {
    INFO(name);
    Tensor rank0 = b.detach().clone();
    g.broadcast(rank0, 0)->wait();
    const Tensor mine = synced->state_dict().at(name);
    if (b.dtype() == DType::Int64) {
      CHECK(mine.to_vector<int64_t>() == rank0.to_vector<int64_t>());
    } else {
      CHECK(max(abs(mine - rank0)).item<double>() == 0.0);
      // Off, each rank keeps its own share's statistics.
      if (g.rank() > 0) CHECK(max(abs(b - rank0)).item<double>() > 1e-6);
    }
  }
}

TEST_CASE("ddp and zero: a rank built with another model is an Error on every rank, naming the tensor", "[ddp][zero]") {
  ProcessGroup& g = world();
  INFO("ranks " << g.size());
  const bool odd = g.rank() == g.size() - 1 && g.size() > 1;  // the last rank differs
  auto widths = [&](int64_t hidden) {
    manual_seed(5);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Linear>(6, hidden), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(hidden, 3)});
  };
  // Another width: the first tensor that differs is named with every rank's shape.
  auto other_width = widths(odd ? 17 : 16);
  if (g.size() > 1) {
    const std::string last = "rank " + std::to_string(g.size() - 1) + ": [17, 6] float32";
    CHECK_THROWS_WITH(DistributedDataParallel(other_width, g),
                      Catch::Contains("DistributedDataParallel") && Catch::Contains("tensor 0 ('0.weight'") &&
                          Catch::Contains("rank 0: [16, 6] float32") && Catch::Contains(last));
    CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group(other_width->parameters(), 0.1)}, g, make_sgd),
                      Catch::Contains("ZeroRedundancyOptimizer") && Catch::Contains("parameter 0 of group 0") &&
                          Catch::Contains("[17, 6] float32 in group 0"));
    // Another number of tensors (an extra layer, or a batch norm's buffers).
    auto deeper = widths(16);
    if (odd) deeper->push_back(std::make_shared<nn::Linear>(3, 3));
    CHECK_THROWS_WITH(DistributedDataParallel(deeper, g),
                      Catch::Contains("number of tensors") && Catch::Contains("rank 0 has 4"));
    // The same tensors in other groups.
    auto same = widths(16);
    TensorList ps = same->parameters();
    std::vector<nn::optim::ParamGroup> groups =
        odd ? std::vector<nn::optim::ParamGroup>{lr_group({ps[0], ps[1]}, 0.1), lr_group({ps[2], ps[3]}, 0.1)}
            : std::vector<nn::optim::ParamGroup>{lr_group({ps[0]}, 0.1), lr_group({ps[1], ps[2], ps[3]}, 0.1)};
    CHECK_THROWS_WITH(ZeroRedundancyOptimizer(groups, g, make_sgd),
                      Catch::Contains("tensor 1") && Catch::Contains("in group 1") && Catch::Contains("in group 0"));
  }
  // The same model everywhere passes, and the collectives after it pair up.
  auto model = widths(16);
  DistributedDataParallel ddp(model, g);
  ZeroRedundancyOptimizer zero({lr_group(widths(16)->parameters(), 0.1)}, g, make_sgd);
  // Nothing to train is refused on every rank, as PyTorch's DDP refuses it.
  auto frozen = widths(16);
  for (Tensor p : frozen->parameters()) p.set_requires_grad(false);
  CHECK_THROWS_WITH(DistributedDataParallel(frozen, g), Catch::Contains("no parameter that requires grad"));
}

TEST_CASE("zero: a factory whose optimizer is not over the shards it was given is refused", "[ddp][zero]") {
  ProcessGroup& g = world();
  auto m = make_model(4100);
  Tensor stray = zeros({3}).set_requires_grad(true);
  auto elsewhere = [&](std::vector<nn::optim::ParamGroup>) -> std::unique_ptr<nn::optim::Optimizer> {
    return std::make_unique<nn::optim::SGD>(TensorList{stray}, 0.1);
  };
  CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group(m->parameters(), 0.1)}, g, elsewhere),
                    Catch::Contains("ZeroRedundancyOptimizer") && Catch::Contains("built over the groups it is given"));
  auto merged = [&](std::vector<nn::optim::ParamGroup> groups) -> std::unique_ptr<nn::optim::Optimizer> {
    TensorList all;
    for (auto& grp : groups) all.insert(all.end(), grp.params.begin(), grp.params.end());
    return std::make_unique<nn::optim::SGD>(all, 0.1);
  };
  TensorList ps = m->parameters();
  CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group({ps[0], ps[1]}, 0.1), lr_group({ps[2], ps[3]}, 0.1)}, g, merged),
                    Catch::Contains("2 groups of one shard each") && Catch::Contains("it has 1 group over"));
}

TEST_CASE("ddp: after a backward that failed, the next one reduces its own gradients only", "[ddp]") {
  ProcessGroup& g = world();
  std::shared_ptr<nn::Linear> second;
  auto make = [&second] {
    manual_seed(90);
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::Linear>(4, 4));
    second = std::make_shared<nn::Linear>(4, 2);
    m->push_back(second);
    m->to(DType::Float64);
    return m;
  };
  auto reference = make();
  auto model = make();  // `second` is now this model's last layer
  DDPOptions o;
  o.bucket_bytes = 8;  // a bucket per parameter, reduced from the last layer's on
  DistributedDataParallel ddp(model, g, o);
  auto rows = [](int r) { return full_like(zeros({3, 4}, TensorOptions(DType::Float64)), 0.5 + r); };
  // Only the last layer gets gradients: its buckets are issued, then the pass fails on the first's.
  CHECK_THROWS_WITH(sum((*second)(rows(g.rank()))).backward(), Catch::Contains("got no gradient"));
  for (auto& p : model->parameters()) p.set_grad(Tensor());
  // A whole pass now: every gradient is the average of this pass's, nothing of the failed one's.
  sum((*model)(rows(g.rank()))).backward();
  // The reference: one process on every rank's rows, the loss divided by the ranks (DDP's average).
  std::vector<Tensor> xs;
  for (int r = 0; r < g.size(); ++r) xs.push_back(rows(r));
  (sum((*reference)(cat(xs))) / static_cast<double>(g.size())).backward();
  auto pm = model->parameters(), pr = reference->parameters();
  for (size_t i = 0; i < pm.size(); ++i) CHECK(max(abs(pm[i].grad() - pr[i].grad())).item<double>() < 1e-12);
}

TEST_CASE("ddp and zero: after a backward that failed midway, the next backward is a pass of its own", "[ddp][zero]") {
  ProcessGroup& g = world();
  for (int kind = 0; kind < 3; ++kind) {  // DDP, ZeRO-1, ZeRO-2
    INFO("ranks " << g.size() << ", " << DataParallelSgd::name(kind));
    auto reference = make_model(5000);
    auto local = make_model(5000);
    // The first layer's weight, whose gradient comes last, throws once from a hook registered before
    // DDP's (ZeRO's): the first backward leaves with the exception after the other buckets were
    // issued, and its end-of-backward callback never runs.
    bool fail = true;
    local->parameters()[0].register_post_accumulate_grad_hook([&fail](Tensor&) {
      if (fail) {
        fail = false;
        throw Error("injected failure");
      }
    });
    nn::optim::SGD ref_opt(reference->parameters(), 0.1, 0.9);
    DataParallelSgd dp(kind, local, g);
    auto [x0, y0] = global_batch(150);
    CHECK_THROWS_WITH(mse_loss((*local)(share(x0, g)), share(y0, g)).backward(), Catch::Contains("injected failure"));
    CHECK(dp.reductions() >= 1);  // buckets were issued before the failure
    for (int64_t step = 0; step < 3; ++step) {
      auto [x, y] = global_batch(151 + step);
      ref_opt.zero_grad();
      mse_loss((*reference)(x), y).backward();
      ref_opt.step();
      dp.zero_grad();
      mse_loss((*local)(share(x, g)), share(y, g)).backward();
      CHECK(dp.reductions() == 4);  // every bucket, this pass's own
      dp.step();
    }
    CHECK(max_param_diff(*reference, *local) < 1e-12);
  }
}

TEST_CASE("ddp and zero: gradients from a recompute's nested backward belong to the backward around it",
          "[ddp][zero]") {
  // The last two layers are recomputed by a checkpoint that does not list their parameters, so they
  // get their gradients the reentrant way: from a backward nested in the outer one, where their
  // hooks run. The pass must end with the outer backward, not the nested one (which would leave the
  // first layer's buckets to be refused as unused, or reduced as zeros).
  ProcessGroup& g = world();
  for (int kind = 0; kind < 3; ++kind) {  // DDP, ZeRO-1, ZeRO-2
    INFO("ranks " << g.size() << ", " << DataParallelSgd::name(kind));
    auto reference = make_model(6000);
    auto local = make_model(6000);
    auto recomputed = [](nn::Sequential& m, const Tensor& x) {
      const Tensor h = m[0]->forward(x);
      return nn::checkpoint([&m](const Tensor& in) { return m[2]->forward(m[1]->forward(in)); }, h);
    };
    nn::optim::SGD ref_opt(reference->parameters(), 0.1, 0.9);
    DataParallelSgd dp(kind, local, g);
    for (int64_t step = 0; step < 3; ++step) {
      auto [x, y] = global_batch(160 + step);
      ref_opt.zero_grad();
      mse_loss((*reference)(x), y).backward();
      ref_opt.step();
      dp.zero_grad();
      mse_loss(recomputed(*local, share(x, g)), share(y, g)).backward();
      CHECK(dp.reductions() == 4);  // every bucket, once
      dp.step();
    }
    CHECK(max_param_diff(*reference, *local) < 1e-12);
  }
}

// A weight used twice: once outside a recompute, once inside it (listed in its options or not).
struct TiedAcrossRecompute : nn::Module {
  Tensor w, b;
  bool listed;
  explicit TiedAcrossRecompute(bool list) : listed(list) {
    Generator g(3);
    w = register_parameter("w", randn({4, 4}, TensorOptions(DType::Float64), g) * 0.5);
    b = register_parameter("b", randn({4}, TensorOptions(DType::Float64), g) * 0.1);
  }
  std::string type_name() const override { return "TiedAcrossRecompute"; }
  Tensor forward(const Tensor& x) {
    nn::CheckpointOptions o;
    if (listed) o.params = {w};
    const Tensor h = matmul(x, w) + b;
    return nn::checkpoint([this](const Tensor& in) { return tanh(matmul(in, w)); }, h, o);
  }
};

TEST_CASE("ddp and zero: a weight used inside a recompute that does not list it and outside it is refused by name",
          "[ddp][zero]") {
  // Unlisted, the weight gets one gradient from the recompute's nested backward and one from the
  // outer backward; its bucket (one per parameter here) is reduced after the first, so the second
  // would be left out. Listed, it gets their sum once, and training equals one process's.
  ProcessGroup& g = world();
  Generator gen(9);
  const Tensor x = randn({kGlobalBatch, 4}, TensorOptions(DType::Float64), gen);
  const Tensor y = randn({kGlobalBatch, 4}, TensorOptions(DType::Float64), gen);
  TiedAcrossRecompute reference(true);
  mse_loss(reference.forward(x), y).backward();
  for (int kind = 0; kind < 3; ++kind) {  // DDP, ZeRO-1, ZeRO-2
    for (const bool listed : {false, true}) {
      INFO("ranks " << g.size() << ", " << DataParallelSgd::name(kind) << (listed ? ", listed" : ", not listed"));
      auto m = std::make_shared<TiedAcrossRecompute>(listed);
      std::optional<DistributedDataParallel> ddp;
      std::optional<ZeroRedundancyOptimizer> zero;
      if (kind == 0) {
        DDPOptions o;
        o.bucket_bytes = 8;
        ddp.emplace(m, g, o);
      } else {
        ZeroOptions o;
        o.bucket_bytes = 8;
        o.stage = kind;
        zero.emplace(std::vector<nn::optim::ParamGroup>{lr_group(m->parameters(), 1.0)}, g, make_sgd_plain, o);
      }
      const Tensor w0 = m->w.detach().clone();
      auto backward = [&] { mse_loss(m->forward(share(x, g)), share(y, g)).backward(); };
      if (!listed) {
        CHECK_THROWS_WITH(backward(), Catch::Contains(kind == 0 ? "parameter 'w'" : "parameter 0 of group 0") &&
                                          Catch::Contains("second gradient") &&
                                          Catch::Contains("CheckpointOptions::params"));
        continue;
      }
      backward();
      if (ddp) {
        CHECK(max(abs(m->w.grad() - reference.w.grad())).item<double>() < 1e-12);
      } else {
        zero->step();  // plain SGD with lr 1: the update is the gradient
        CHECK(max(abs((w0 - m->w.detach()) - reference.w.grad())).item<double>() < 1e-12);
      }
    }
  }
}

TEST_CASE("zero: frozen parameters stay out of the shards (an unsharded optimizer skips them); ddp broadcasts them",
          "[ddp][zero]") {
  ProcessGroup& g = world();
  auto decayed = [](TensorList params) {
    nn::optim::ParamGroup grp = lr_group(std::move(params), 0.1);
    grp.weight_decay = 0.25;  // would move a frozen parameter if its shard stepped it
    return grp;
  };
  for (const int stage : {1, 2}) {
    INFO("ranks " << g.size() << ", rank " << g.rank() << ", ZeRO-" << stage);
    // The reference: one process on the whole batch, an unsharded SGD (momentum, weight decay) over
    // every parameter, the first frozen (fine-tuning). ZeRO's ranks start from other weights.
    auto reference = make_model(4000);
    auto local = make_model(4000 + static_cast<uint64_t>(g.rank()));
    reference->parameters()[0].set_requires_grad(false);
    local->parameters()[0].set_requires_grad(false);
    const Tensor frozen_before = reference->parameters()[0].clone();
    nn::optim::SGD ref_opt(std::vector<nn::optim::ParamGroup>{decayed(reference->parameters())}, 0.9);
    ZeroOptions o;
    o.bucket_bytes = 100;
    o.stage = stage;
    // A second group with nothing that trains: its shard has no elements.
    ZeroRedundancyOptimizer zero({decayed(local->parameters()), decayed({})}, g, make_sgd, o);
    CHECK(max_param_diff(*reference, *local) == 0.0);  // the frozen weight is rank 0's too
    CHECK(zero.shard_numel()[1] == 0);
    for (int64_t step = 0; step < 3; ++step) {
      auto [x, y] = global_batch(step);
      ref_opt.zero_grad();
      mse_loss((*reference)(x), y).backward();
      ref_opt.step();
      zero.zero_grad();
      mse_loss((*local)(share(x, g)), share(y, g)).backward();
      zero.step();
    }
    CHECK(max(abs(local->parameters()[0] - frozen_before)).item<double>() == 0.0);
    CHECK(max_param_diff(*reference, *local) < 1e-12);
    // Its state is the unsharded optimizer's: none for the frozen parameter, the groups' whole sizes.
    const auto want = ref_opt.state_dict();
    const auto got = zero.state_dict();
    CHECK(want.count("state.0.momentum_buffer") == 0);
    CHECK(got.at("group.0.params").item<int64_t>() == 4);
    CHECK(got.at("group.1.params").item<int64_t>() == 0);
    for (const auto& [key, t] : want) {
      INFO(key);
      REQUIRE(got.count(key) == 1);
      CHECK(max(abs(got.at(key).to(DType::Float64) - t.to(DType::Float64))).item<double>() < 1e-12);
    }
    std::map<std::string, Tensor> loaded = want;
    loaded.erase("group.1.params");  // ref_opt has one group; ZeRO's second has no state to load
    loaded["group.1.lr"] = got.at("group.1.lr");
    zero.load_state_dict(loaded);
    loaded["state.0.momentum_buffer"] = zeros({16, 6}, TensorOptions(DType::Float64));
    CHECK_THROWS_WITH(
        zero.load_state_dict(loaded),
        Catch::Contains("\"state.0.momentum_buffer\" is state of parameter 0") && Catch::Contains("frozen"));
    // Unfrozen after construction: no shard holds it. Refused at the step, on every rank.
    local->parameters()[0].set_requires_grad(true);
    zero.zero_grad();
    mse_loss((*local)(share(global_batch(9).first, g)), share(global_batch(9).second, g)).backward();
    CHECK_THROWS_WITH(zero.step(), Catch::Contains("parameter 0 of group 0 (shape [16, 6]) was frozen when the "
                                                   "optimizer was built and requires grad now"));
    // Frozen after construction: its shard would still decay it.
    local->parameters()[0].set_requires_grad(false);
    local->parameters()[2].set_requires_grad(false);
    CHECK_THROWS_WITH(zero.clip_grad_norm_(1.0),
                      Catch::Contains("clip_grad_norm_: parameter 2 of group 0 (shape [3, 16]) was trainable"));
  }
  // Nothing to shard; a parameter in two groups.
  auto m = make_model(4000);
  TensorList params = m->parameters();
  for (Tensor& p : params) p.set_requires_grad(false);
  CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group(params, 0.1)}, g, make_sgd),
                    Catch::Contains("no parameter requires grad (4 frozen)"));
  for (Tensor& p : params) p.set_requires_grad(true);
  CHECK_THROWS_WITH(ZeroRedundancyOptimizer({lr_group({params[0], params[1]}, 0.1), lr_group({params[1]}, 0.1)}, g,
                                            make_sgd),
                    Catch::Contains("parameter 0 of group 1") && Catch::Contains("appears more than once"));
  // DDP broadcasts every parameter, the frozen ones as well as the trained ones.
  auto local = make_model(4000 + static_cast<uint64_t>(g.rank()));
  local->parameters()[0].set_requires_grad(false);
  DistributedDataParallel ddp(local, g);
  auto reference = make_model(4000);
  CHECK(max_param_diff(*reference, *local) == 0.0);
}

TEST_CASE("ddp and zero-1: with a profiler, the communication backward waits for is the comm phase",
          "[ddp][zero][profiler][async]") {
  ProcessGroup& g = world();
  for (const bool zero : {false, true}) {
    INFO("ranks " << g.size() << ", rank " << g.rank() << (zero ? ", ZeRO-1" : ", DDP"));
    auto local = make_model(2000);
    // The last rank is late to the final all-reduce (reduce-scatter): it sleeps when backward reaches
    // the first parameter, which backward produces last, before the hook of DDP (ZeRO-1), registered
    // later, issues the bucket. The other ranks wait for it in the comm phase, not in backward's.
    // (One rank waits for no one; its comm phase is the last bucket's own reduction.)
    const bool late = g.size() > 1 && g.rank() == g.size() - 1;
    if (late) {
      local->parameters()[0].register_post_accumulate_grad_hook(
          [](Tensor&) { std::this_thread::sleep_for(std::chrono::milliseconds(60)); });
    }
    profile::StepProfiler prof(Device::cpu());
    std::optional<DistributedDataParallel> ddp;
    std::optional<ZeroRedundancyOptimizer> zero_opt;
    if (zero) {
      zero_opt.emplace(std::vector<nn::optim::ParamGroup>{lr_group(local->parameters(), 0.1)}, g, make_sgd);
      zero_opt->set_profiler(&prof);
    } else {
      ddp.emplace(local, g);
      ddp->set_profiler(&prof);
    }
    auto [x, y] = global_batch(21);
    prof.begin(profile::Phase::Forward);
    Tensor loss = mse_loss((*local)(share(x, g)), share(y, g));
    {
      profile::PhaseScope backward(&prof, profile::Phase::Backward);
      loss.backward();
    }
    prof.end_step();
    const profile::StepTimes t = prof.report();
    const double comm = t.phase_ms[static_cast<size_t>(profile::Phase::Communication)];
    const double back = t.phase_ms[static_cast<size_t>(profile::Phase::Backward)];
    CHECK(t.steps == 1);
    CHECK(comm > 0);
    // The others wait out most of the late rank's 60 ms in comm: the margin is for ranks that reach
    // the end of backward at different times on a loaded machine (more ranks than cores in CI).
    if (g.size() > 1 && !late) CHECK(comm >= 20);
    if (late) CHECK(back >= 55);  // its own sleep is backward's
  }
}

// Evaluation is each rank's own, as PyTorch's SyncBatchNorm: without running statistics a converted
// batch norm normalizes with its rank's batch, and one rank may evaluate while the others do not
// (no collective: a rank alone would wait for the others forever).
TEST_CASE("sync batch norm: evaluation without running statistics is each rank's own", "[ddp][syncbn]") {
  ProcessGroup& g = world();
  auto model = std::make_shared<nn::Sequential>();
  auto bn = std::make_shared<nn::BatchNorm2d>(2, 1e-5, 0.1, /*affine=*/true, /*track_running_stats=*/false);
  model->push_back(bn);
  CHECK(convert_sync_batchnorm(*model, g) == 1);
  model->eval();
  manual_seed(40 + static_cast<uint64_t>(g.rank()));
  const Tensor x = randn({3, 2, 2, 2}) * (1.0 + g.rank());
  if (g.rank() == 0) {  // rank 0 alone
    const Tensor local = batch_norm(x, Tensor(), Tensor(), bn->weight, bn->bias, true, 0.1, 1e-5);
    CHECK(max(abs((*model)(x) - local)).item<double>() == 0.0);
  }
  g.barrier();
}

// One value per channel in the whole job: refused like the plain batch norm (the unbiased running
// variance divided by 0 and stored NaN); over two ranks the two values are a sample. One value over
// several ranks (the others' batches empty) only the job's count knows, on the device: the running
// statistics stay as they were, and stay finite.
TEST_CASE("sync batch norm: one value per channel in the whole job is refused or leaves the running statistics",
          "[ddp][syncbn]") {
  ProcessGroup& g = world();
  auto model = std::make_shared<nn::Sequential>();
  auto bn = std::make_shared<nn::BatchNorm2d>(2);
  model->push_back(bn);
  CHECK(convert_sync_batchnorm(*model, g) == 1);
  Tensor x = randn({1, 2, 1, 1});
  if (g.size() == 1) {
    CHECK_THROWS_WITH((*model)(x), Catch::Contains("expected more than 1 value per channel"));
    CHECK(bn->running_var.to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  } else {
    (*model)(x);
    CHECK_FALSE(any(isnan(bn->running_var)).item<bool>());
    CHECK(bn->running_var.to_vector<float>() != std::vector<float>{1.0f, 1.0f});  // a sample: updated
    // Rank 0 holds the job's only value per channel; the others' batches are empty.
    NoGradGuard no_grad;
    bn->running_mean.fill_(0.25);
    bn->running_var.fill_(2.0);
    (*model)(g.rank() == 0 ? randn({1, 2, 1, 1}) : zeros({0, 2, 1, 1}));
    CHECK(bn->running_mean.to_vector<float>() == std::vector<float>{0.25f, 0.25f});
    CHECK(bn->running_var.to_vector<float>() == std::vector<float>{2.0f, 2.0f});
  }
}
