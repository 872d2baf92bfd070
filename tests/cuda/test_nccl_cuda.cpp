// The NCCL backend on one GPU (a group of one: NCCL refuses two ranks on one device, so several
// ranks need several GPUs): every collective and the grouped exchange go through NCCL on the
// communication stream and come back ordered on the caller's stream, from the default stream and
// from a side stream; the ring's device reductions against the CPU's; DDP (with and without its
// gradients as bucket views), ZeRO-1 and ZeRO-2 over CUDA parameters against plain training, and
// their gradients sent in bfloat16 and float16 (rounded, exactly); ZeRO-1's clip and gathered state
// against plain AdamW's; synchronized batch norm against the fused kernel; CPU tensors refused;
// channels-last and transposed tensors through the collectives as their block of memory.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/kiln.h"
#include "dist/ddp.h"
#include "dist/reduce.h"
#include "dist/sync_batch_norm.h"
#include "dist/zero.h"
#include "nn/layers.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/sgd.h"

using namespace kiln;
using namespace kiln::dist;

namespace {

nn::optim::ParamGroup lr_group(TensorList params, double lr) {
  nn::optim::ParamGroup g;
  g.params = std::move(params);
  g.lr = lr;
  return g;
}

ProcessGroup& nccl_group() {
  INFO("cuda::is_available() is false: " << cuda::unavailable_reason());
  REQUIRE(cuda::is_available());
  REQUIRE(nccl_available());
  return nccl_world();
}

// Values that depend on the position, made by a kernel on the current stream just before use.
Tensor ramp(int64_t n, DType dt) {
  return (arange(0, n, 1, TensorOptions(DType::Float32, Device::cuda())) * 3.0 - 7.0).to(dt);
}

// A two-layer MLP on the GPU, its weights drawn from `seed`.
std::shared_ptr<nn::Sequential> small_model(uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(6, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 3)});
  m->to(Device::cuda());
  return m;
}

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(Device::cpu()).to(DType::Float64) - b.to(Device::cpu()).to(DType::Float64))).item<double>();
}

}  // namespace

TEST_CASE("nccl: a group of one on the GPU", "[cuda][nccl]") {
  ProcessGroup& g = nccl_group();
  CHECK(g.backend() == "nccl");
  CHECK(g.rank() == 0);
  CHECK(g.size() == 1);
  CHECK(&world_for(Device::cuda()) == &g);
}

TEST_CASE("nccl: collectives, native and ring, every dtype, from the default and a side stream", "[cuda][nccl]") {
  ProcessGroup& g = nccl_group();
  cuda::CudaStream side;
  for (bool on_side : {false, true}) {
    std::unique_ptr<cuda::StreamGuard> guard;
    if (on_side) guard = std::make_unique<cuda::StreamGuard>(side.get());
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int64}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg}) {
        if (op == ReduceOp::Avg && dt == DType::Int64) continue;
        for (AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
          INFO(dtype_name(dt) << " " << reduce_op_name(op) << " " << all_reduce_algo_name(algo) << " side " << on_side);
          Tensor t = ramp(100003, dt);
          const Tensor expect = t.clone();
          g.all_reduce(t, op, algo)->wait();
          CHECK(max_diff(t, expect) == 0.0);  // one rank: the reduction is the tensor itself
        }
      }
    }
    Tensor in = ramp(12, DType::Float32), out = zeros({12}, TensorOptions(DType::Float32, Device::cuda()));
    g.reduce_scatter(out, in)->wait();
    CHECK(max_diff(out, in) == 0.0);
    Tensor gathered = zeros({12}, TensorOptions(DType::Float32, Device::cuda()));
    g.all_gather(gathered, in)->wait();
    CHECK(max_diff(gathered, in) == 0.0);
    Tensor b = ramp(1000, DType::BFloat16);
    const Tensor b0 = b.clone();
    g.broadcast(b, 0)->wait();
    CHECK(max_diff(b, b0) == 0.0);
    // The grouped exchange, with this rank as its own neighbour.
    Tensor send = ramp(4097, DType::Float16), recv = zeros({4097}, TensorOptions(DType::Float16, Device::cuda()));
    g.send_recv(send, 0, recv, 0, 0);
    CHECK(max_diff(recv, send) == 0.0);
    std::shared_ptr<Work> w = g.all_reduce(send);
    w->synchronize();
    CHECK(w->completed());
    g.barrier();
  }
}

TEST_CASE("nccl: channels-last and transposed tensors go through as their block of memory, in place", "[cuda][nccl]") {
  ProcessGroup& g = nccl_group();
  const Tensor values = ramp(2 * 3 * 4 * 5, DType::Float32).view({2, 3, 4, 5});
  for (AllReduceAlgo algo : {AllReduceAlgo::Native, AllReduceAlgo::Ring}) {
    Tensor t = values.contiguous(MemoryFormat::ChannelsLast);
    const void* where = t.data_ptr();
    g.all_reduce(t, ReduceOp::Avg, algo)->wait();
    CHECK(t.data_ptr() == where);
    CHECK(t.is_contiguous(MemoryFormat::ChannelsLast));
    CHECK(max_diff(t, values) == 0.0);
  }
  Tensor m = ramp(12, DType::BFloat16).view({3, 4}).t();
  const Tensor m0 = m.clone();
  g.broadcast(m, 0)->wait();
  CHECK(max_diff(m, m0) == 0.0);
  // To this rank itself: the receive lands in a channels-last tensor as the logical values.
  Tensor recv =
      zeros({2, 3, 4, 5}, TensorOptions(DType::Float32, Device::cuda())).contiguous(MemoryFormat::ChannelsLast);
  g.send_recv(values.contiguous(MemoryFormat::ChannelsLast), 0, recv, 0, 0);
  CHECK(max_diff(recv, values) == 0.0);
  Tensor gaps = zeros({4, 8}, TensorOptions(DType::Float32, Device::cuda())).narrow(1, 0, 4);
  CHECK_THROWS_WITH(g.all_reduce(gaps), Catch::Contains("must be dense"));
}

TEST_CASE("nccl: the ring's reductions on the device equal the CPU's", "[cuda][nccl]") {
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16, DType::Int32, DType::UInt8}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      INFO(dtype_name(dt) << " " << reduce_op_name(op));
      Generator gen(5);
      Tensor a = (rand({3001}, TensorOptions(DType::Float32), gen) * 100.0).to(dt);
      Tensor b = (rand({3001}, TensorOptions(DType::Float32), gen) * 100.0).to(dt);
      Tensor cpu = a.clone(), dev = a.to(Device::cuda());
      dist::detail::reduce_tensor(cpu, b, op);
      dist::detail::reduce_tensor(dev, b.to(Device::cuda()), op);
      CHECK(max_diff(dev, cpu) == 0.0);
    }
  }
  Tensor h = ramp(999, DType::Float32);
  Tensor c = h.to(Device::cpu());
  dist::detail::divide_tensor(h, 3.0);
  dist::detail::divide_tensor(c, 3.0);
  CHECK(max_diff(h, c) <= 1e-6 * max(abs(c)).item<double>());
  ProcessGroup& g = nccl_group();
  Tensor cpu_tensor = zeros({4});
  CHECK_THROWS_AS(g.all_reduce(cpu_tensor), DeviceError);
}

TEST_CASE("nccl: DDP and ZeRO over CUDA parameters equal plain training in a group of one", "[cuda][nccl]") {
  ProcessGroup& g = nccl_group();
  auto plain = small_model(3), wrapped = small_model(3), sharded = small_model(3);
  auto viewed = small_model(3), sharded2 = small_model(3);
  DDPOptions o;
  o.bucket_bytes = 256;  // several buckets, each reduced while backward goes on
  DistributedDataParallel ddp(wrapped, g, o);
  REQUIRE(ddp.buckets().size() > 1);
  DDPOptions views = o;  // the gradients as views of the buckets, averaged in place
  views.gradient_as_bucket_view = true;
  DistributedDataParallel ddp_views(viewed, g, views);
  nn::optim::AdamW opt_plain(plain->parameters(), 1e-2), opt_ddp(wrapped->parameters(), 1e-2);
  nn::optim::AdamW opt_views(viewed->parameters(), 1e-2);
  auto adamw = [](std::vector<nn::optim::ParamGroup> groups) {
    return std::make_unique<nn::optim::AdamW>(std::move(groups));
  };
  ZeroRedundancyOptimizer zero({lr_group(sharded->parameters(), 1e-2)}, g, adamw);
  ZeroOptions stage2;  // the gradients released once reduced; each bucket's buffer only while in use
  stage2.bucket_bytes = 256;
  stage2.stage = 2;
  ZeroRedundancyOptimizer zero2({lr_group(sharded2->parameters(), 1e-2)}, g, adamw, stage2);
  Generator gen(9);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({16, 6}, TensorOptions(DType::Float32), gen).to(Device::cuda());
    Tensor y = randn({16, 3}, TensorOptions(DType::Float32), gen).to(Device::cuda());
    opt_plain.zero_grad();
    mse_loss((*plain)(x), y).backward();
    opt_plain.step();
    opt_ddp.zero_grad();
    mse_loss((*wrapped)(x), y).backward();
    CHECK(ddp.reductions() == static_cast<int64_t>(ddp.buckets().size()));
    opt_ddp.step();
    opt_views.zero_grad(/*set_to_none=*/step == 0);  // then accumulated in place into the buckets
    mse_loss((*viewed)(x), y).backward();
    opt_views.step();
    zero.zero_grad();
    mse_loss((*sharded)(x), y).backward();
    zero.step();
    zero2.zero_grad();
    mse_loss((*sharded2)(x), y).backward();
    for (const Tensor& p : sharded2->parameters()) CHECK_FALSE(p.grad().defined());  // released
    zero2.step();
  }
  auto pp = plain->parameters(), pw = wrapped->parameters(), ps = sharded->parameters();
  auto pv = viewed->parameters(), ps2 = sharded2->parameters();
  for (size_t i = 0; i < pp.size(); ++i) {
    CHECK(max_diff(pw[i], pp[i]) == 0.0);
    CHECK(max_diff(pv[i], pp[i]) == 0.0);
    CHECK(max_diff(ps[i], pp[i]) <= 1e-6);
    CHECK(max_diff(ps2[i], pp[i]) <= 1e-6);
  }
}

TEST_CASE("nccl: gradients sent in bfloat16 and float16 come back rounded to them in a group of one", "[cuda][nccl]") {
  // One rank averages nothing, so what DDP's and ZeRO-2's comm_dtype leave is each float32 gradient
  // rounded to the wire's dtype, exactly; ZeRO-2's plain SGD step with lr 1 subtracts that.
  ProcessGroup& g = nccl_group();
  for (const DType wire : {DType::BFloat16, DType::Float16}) {
    INFO("comm_dtype " << dtype_name(wire));
    auto plain = small_model(4), wrapped = small_model(4), sharded = small_model(4);
    DDPOptions o;
    o.bucket_bytes = 256;
    o.comm_dtype = wire;
    DistributedDataParallel ddp(wrapped, g, o);
    ZeroOptions z;
    z.bucket_bytes = 256;
    z.stage = 2;
    z.comm_dtype = wire;
    auto sgd = [](std::vector<nn::optim::ParamGroup> groups) {
      return std::make_unique<nn::optim::SGD>(std::move(groups));
    };
    ZeroRedundancyOptimizer zero({lr_group(sharded->parameters(), 1.0)}, g, sgd, z);
    Generator gen(10);
    Tensor x = randn({16, 6}, TensorOptions(DType::Float32), gen).to(Device::cuda());
    Tensor y = randn({16, 3}, TensorOptions(DType::Float32), gen).to(Device::cuda());
    mse_loss((*plain)(x), y).backward();
    mse_loss((*wrapped)(x), y).backward();
    mse_loss((*sharded)(x), y).backward();
    zero.step();
    auto pp = plain->parameters(), pw = wrapped->parameters(), ps = sharded->parameters();
    NoGradGuard no_grad;
    for (size_t i = 0; i < pp.size(); ++i) {
      const Tensor rounded = pp[i].grad().to(wire).to(DType::Float32);
      CHECK(max_diff(pw[i].grad(), rounded) == 0.0);
      CHECK(max_diff(ps[i], pp[i] - rounded) == 0.0);
      CHECK(max_diff(pw[i].grad(), pp[i].grad()) > 0.0);  // the rounding shows
    }
  }
}

TEST_CASE("nccl: ZeRO-1's clip and state over CUDA parameters equal plain AdamW's in a group of one",
          "[cuda][nccl]") {
  ProcessGroup& g = nccl_group();
  auto adamw = [](std::vector<nn::optim::ParamGroup> groups) {
    return std::make_unique<nn::optim::AdamW>(std::move(groups));
  };
  auto plain = small_model(5), sharded = small_model(5);
  nn::optim::AdamW opt_plain(plain->parameters(), 1e-2);
  ZeroRedundancyOptimizer zero({lr_group(sharded->parameters(), 1e-2)}, g, adamw);
  Generator gen(11);
  auto batch = [&gen] {
    return std::make_pair(randn({16, 6}, TensorOptions(DType::Float32), gen).to(Device::cuda()),
                          randn({16, 3}, TensorOptions(DType::Float32), gen).to(Device::cuda()));
  };
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch();
    opt_plain.zero_grad();
    mse_loss((*plain)(x), y).backward();
    const double want = nn::optim::clip_grad_norm_(plain->parameters(), 0.05).item<double>();
    opt_plain.step();
    zero.zero_grad();
    mse_loss((*sharded)(x), y).backward();
    const Tensor norm = zero.clip_grad_norm_(0.05);
    zero.step();
    CHECK(norm.device() == Device::cuda());
    CHECK(std::abs(norm.item<double>() - want) <= 1e-6 * want);
    CHECK(want > 0.05);  // the clip acted
  }
  auto pp = plain->parameters(), ps = sharded->parameters();
  for (size_t i = 0; i < pp.size(); ++i) CHECK(max_diff(ps[i], pp[i]) <= 1e-5);
  // The gathered state is the plain optimizer's; loaded into a fresh ZeRO-1, it trains on alike.
  const auto want_state = opt_plain.state_dict(), got_state = zero.state_dict();
  REQUIRE(got_state.size() == want_state.size());
  for (const auto& [key, t] : want_state) {
    INFO(key);
    REQUIRE(got_state.count(key) == 1);
    CHECK(max_diff(got_state.at(key), t) <= 1e-5);
  }
  auto resumed_model = small_model(6);
  ZeroRedundancyOptimizer resumed({lr_group(resumed_model->parameters(), 1e-2)}, g, adamw);
  resumed.load_state_dict(want_state);
  for (size_t i = 0; i < pp.size(); ++i) {
    NoGradGuard no_grad;
    resumed_model->parameters()[i].copy_(pp[i]);
  }
  auto [x, y] = batch();
  opt_plain.zero_grad();
  mse_loss((*plain)(x), y).backward();
  opt_plain.step();
  resumed.zero_grad();
  mse_loss((*resumed_model)(x), y).backward();
  resumed.step();
  auto pr = resumed_model->parameters();
  for (size_t i = 0; i < pp.size(); ++i) CHECK(max_diff(pr[i], pp[i]) <= 1e-6);
}

TEST_CASE("nccl: synchronized batch norm on the GPU equals the fused kernel in a group of one", "[cuda][nccl]") {
  ProcessGroup& g = nccl_group();
  auto make = [] {
    manual_seed(12);
    auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Conv2d>(3, 8, Pair{3, 3}, Pair{1, 1}, Pair{1, 1}, Pair{1, 1}, 1, false),
        std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(1),
        std::make_shared<nn::Linear>(8 * 6 * 6, 4)});
    m->to(Device::cuda());
    return m;
  };
  auto fused = make(), synced = make();
  REQUIRE(convert_sync_batchnorm(*synced, g) == 1);
  nn::optim::AdamW a(fused->parameters(), 1e-2), b(synced->parameters(), 1e-2);
  Generator gen(4);
  for (int step = 0; step < 3; ++step) {
    Tensor x = (randn({10, 3, 6, 6}, TensorOptions(DType::Float32), gen) * 3.0 + 1.0).to(Device::cuda());
    Tensor y = randn({10, 4}, TensorOptions(DType::Float32), gen).to(Device::cuda());
    a.zero_grad();
    mse_loss((*fused)(x), y).backward();
    a.step();
    b.zero_grad();
    mse_loss((*synced)(x), y).backward();
    b.step();
  }
  const auto sa = fused->state_dict(), sb = synced->state_dict();
  for (const auto& [name, t] : sa) {
    INFO(name);
    if (t.dtype() != DType::Int64) CHECK(max_diff(t, sb.at(name)) <= 1e-4);
  }
}
